"""PyTorch's causal scaled_dot_product_attention in bf16 (the flash backend autocast takes) on the shape of
benchmarks/attention_benchmark.cpp: the forward's and the backward's GPU time (CUDA events, median) and
TFLOP/s, one JSON line, to set beside ferry's kernels run in the same call.
    python3 benchmarks/attention_peer.py [BATCH SEQUENCE CHANNELS HEADS [REPETITIONS]]"""
import json
import sys

import torch
import torch.nn.functional as F


def median_milliseconds(work, repetitions):
    work()
    times = []
    for _ in range(repetitions):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


def main():
    batch, sequence, channels, heads, repetitions = ([int(a) for a in sys.argv[1:6]] + [16, 1024, 768, 12, 20][len(sys.argv[1:6]):])
    head_size = channels // heads
    shape = (batch, heads, sequence, head_size)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    # The backward's time: forward and backward together, less the forward alone.
    forward_ms = median_milliseconds(forward, repetitions)
    forward_and_backward_ms = median_milliseconds(lambda: torch.autograd.grad(
        F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout), repetitions)
    products = batch * sequence * sequence * channels / 2
    backward_ms = forward_and_backward_ms - forward_ms
    print(json.dumps({"who": "pytorch sdpa", "products": "bf16", "torch": torch.__version__, "batch": batch, "sequence": sequence,
                      "channels": channels, "heads": heads, "forward_ms": round(forward_ms, 4), "backward_ms": round(backward_ms, 4),
                      "forward_tflops": round(4 * products / forward_ms / 1e9, 1),
                      "backward_tflops": round(10 * products / backward_ms / 1e9, 1)}))


if __name__ == "__main__":
    main()
