"""How close does a real GPU come to `tokenrace plan`'s decode bound? Run it on a machine with a GPU.

`plan` bounds one decode step at batch 1 by the bytes of weights read ÷ the catalog's memory
bandwidth. This script measures the two things that bound rests on, with the model's own shapes
(random bf16 weights, so nothing is downloaded):
- the device's copy bandwidth (a device-to-device copy, bytes read + written ÷ time);
- one batch-1 decode step's matrix-vector products over every layer and the LM head, replayed as
  one CUDA graph (so kernel launches don't count), at `--batch` sequences; attention over the KV
  cache is left out (at short context it reads far fewer bytes than the weights).
Printed: ms per step, the weight bytes ÷ that time (the bandwidth reached), and plan's bound for the
same model, device and precision, with the share of it reached.

    python benchmarks/decode_roofline.py --model llama-3.1-8b --hardware H100-SXM
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from tokenrace.plan.catalog import load_hardware, load_model


def copy_bandwidth(gib: float = 4.0, reps: int = 20) -> float:
    n = int(gib * 2**30) // 2
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        b.copy_(a)
    torch.cuda.synchronize()
    took = time.perf_counter() - start
    return float(2 * a.numel() * a.element_size() * reps / took)


def layer_shapes(name: str) -> tuple[list[tuple[int, int]], int]:
    spec = load_model(name)
    if spec.moe is not None:
        raise SystemExit(f"{spec.name} is a mixture of experts: this check covers dense models")
    h, inter = spec.hidden_size, spec.intermediate_size
    shapes: list[tuple[int, int]] = []
    for group in spec.attention:
        q, kv = group.q_heads * group.head_dim, group.kv_heads * group.head_dim
        per_layer = [(h, q), (h, kv), (h, kv), (q, h), (h, inter), (h, inter), (inter, h)]
        shapes += per_layer * group.layers
    return shapes, spec.vocab_size


def decode_step_seconds(shapes: list[tuple[int, int]], vocab: int, hidden: int, batch: int) -> tuple[float, int]:
    weights = [torch.randn(k, n, dtype=torch.bfloat16, device="cuda") * 0.01 for k, n in shapes]
    head = torch.randn(hidden, vocab, dtype=torch.bfloat16, device="cuda") * 0.01
    total_bytes = sum(w.numel() * 2 for w in weights) + head.numel() * 2
    inputs = {k: torch.randn(batch, k, dtype=torch.bfloat16, device="cuda") for k in {k for k, _ in shapes}}
    x_head = torch.randn(batch, hidden, dtype=torch.bfloat16, device="cuda")

    def step() -> None:
        for w in weights:
            torch.matmul(inputs[w.shape[0]], w)
        torch.matmul(x_head, head)

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    reps = 50
    start = time.perf_counter()
    for _ in range(reps):
        graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps, total_bytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--hardware", default="H100-SXM")
    ap.add_argument("--batch", type=int, action="append", help="sequences per step (repeat; default 1 and 8)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU on this machine", file=sys.stderr)
        return 2
    hw = load_hardware(args.hardware)
    spec = load_model(args.model)
    print(f"device: {torch.cuda.get_device_name(0)}; catalog row {hw.name}: {hw.bandwidth_bytes_per_s / 1e12:.2f} TB/s")
    copy = copy_bandwidth()
    print(f"copy bandwidth: {copy / 1e12:.2f} TB/s ({100 * copy / hw.bandwidth_bytes_per_s:.0f} % of the catalog's)")
    shapes, vocab = layer_shapes(args.model)
    for batch in args.batch or [1, 8]:
        seconds, total = decode_step_seconds(shapes, vocab, spec.hidden_size, batch)
        bound = total / hw.bandwidth_bytes_per_s
        print(
            f"{spec.name} bf16, batch {batch}: {seconds * 1e3:.2f} ms a step ({batch / seconds:.0f} tok/s), "
            f"{total / 1e9:.2f} GB of weights read at {total / seconds / 1e12:.2f} TB/s; plan's bound "
            f"{bound * 1e3:.2f} ms ({batch / bound:.0f} tok/s): {100 * bound / seconds:.0f} % of it reached"
        )
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
