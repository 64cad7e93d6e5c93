"""Turn a GGUF file into a Hugging Face folder vLLM's CPU build can serve.

A script, run by the interpreter of .venv-vllm (serve/vllm_cpu.py starts it): it imports
transformers and torch, which tokenrace's own environment does not have, and nothing of tokenrace.

    python gguf_to_hf.py MODEL.gguf OUT_DIR

transformers dequantizes the GGUF's tensors (`from_pretrained(dir, gguf_file=...)`, with the gguf
package). The loaded model still carries a quantization config naming GGUF, which vLLM would then
try to honour; a model built from the config without it, with the dequantized weights loaded into
it, saves as a plain float32 checkpoint. The tokenizer, its chat template among them, comes from
the GGUF's own metadata.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    import torch  # noqa: PLC0415 - optional dependency: only in .venv-vllm
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - optional dependency: as torch

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # A tied output layer (SmolLM2's) has no weight of its own; anything else missing is a bug.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"the dequantized weights do not fit the model: missing {missing}, unexpected {unexpected}")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out)  # whole or absent: a conversion killed half-way leaves no folder that looks done


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python gguf_to_hf.py MODEL.gguf OUT_DIR")
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
