"""The doctor checks. Importing this package registers them; they run and print in import order:
the bus, the kernel side of the driver, containers, nvidia-smi, CUDA and PyTorch, engines, the model.
"""

# isort: skip_file
from tokenrace.doctor.checks import gpu  # noqa: F401  pci, nouveau
from tokenrace.doctor.checks import kernel  # noqa: F401  dkms, secure-boot, nvidia-module
from tokenrace.doctor.checks import container  # noqa: F401  container
from tokenrace.doctor.checks import smi  # noqa: F401  nvidia-smi
from tokenrace.doctor.checks import cuda  # noqa: F401  cuda-toolkit, torch
from tokenrace.doctor.checks import engines  # noqa: F401  engines
from tokenrace.doctor.checks import model  # noqa: F401  model-disk, model-ram, model-vram
