"""Keep one NVIDIA GPU busy for N seconds with bf16 matrix products and print the rate reached.

A load for benchmarks/record_nvml.py and benchmarks/energy_check.py (PyTorch with CUDA needed).

    python benchmarks/gpu_burn.py 20
"""

from __future__ import annotations

import sys
import time

import torch


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start = time.perf_counter()
    products = 0
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        products += 20
    took = time.perf_counter() - start
    print(
        f"gpu_burn: {products} products of {n}^3 bf16 in {took:.1f} s, {2 * n**3 * products / took / 1e12:.0f} TFLOP/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
