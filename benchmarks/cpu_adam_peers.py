#!/usr/bin/env python3
"""CPU Adam step times of ferry's peers, for cpu_adam_benchmark.sh: torch.optim.AdamW (foreach=False,
foreach=True, and fused=True where this torch has a CPU fused AdamW, 2.4+) and DeepSpeed's
DeepSpeedCPUAdam (AVX-512/AVX2, when deepspeed is importable; its op is compiled on first use).

  cpu_adam_peers.py [--sizes 1e6,1e7,1e8,1e9] [--threads 1,2] [--min-time 0.5] [--variants torch,torch-foreach,...]

One float32 parameter of each size with a gradient, lr 3e-4, weight decay 0.01 (AdamW), set_num_threads
(threads). One warm-up step, then steps until min-time seconds have passed (at least 2); prints one JSON
object per line: variant ("torch X.Y" + mode, or "deepspeed X.Y"), size, threads, seconds_per_step,
elements_per_second. A size whose tensors (4 of the size, plus 2 of temporaries) do not fit in
MemAvailable, or a variant this Python lacks, is printed with "skipped" and the reason.
"""
import argparse
import json
import time

import torch


def available_bytes():
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def make_optimizer(variant, param):
    if variant == "deepspeed":
        from deepspeed.ops.adam import DeepSpeedCPUAdam  # noqa: PLC0415 (optional peer)
        return DeepSpeedCPUAdam([param], lr=3e-4, weight_decay=0.01, adamw_mode=True)
    options = {"torch": {"foreach": False}, "torch-foreach": {"foreach": True}, "torch-fused": {"fused": True}}[variant]
    return torch.optim.AdamW([param], lr=3e-4, weight_decay=0.01, **options)


def variant_name(variant):
    if variant == "deepspeed":
        import deepspeed  # noqa: PLC0415
        return f"deepspeed {deepspeed.__version__} DeepSpeedCPUAdam"
    return f"torch {torch.__version__.split('+')[0]} {variant.replace('torch-', '') if variant != 'torch' else 'plain'}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7,1e8,1e9")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--variants", default="torch,torch-foreach")
    args = parser.parse_args()
    variants = []
    for variant in args.variants.split(","):
        try:
            make_optimizer(variant, torch.nn.Parameter(torch.zeros(4)))
            variants.append(variant)
        except (ImportError, RuntimeError, TypeError, ValueError) as error:  # an older torch, no deepspeed
            print(json.dumps({"variant": variant, "skipped": f"not available here: {error}"}), flush=True)
    for size in (int(float(s)) for s in args.sizes.split(",")):
        needed = size * 4 * 6
        if needed + (1 << 30) > available_bytes():
            print(json.dumps({"size": size, "skipped": f"needs ~{needed >> 20} MiB, "
                                                      f"{available_bytes() >> 20} MiB available"}), flush=True)
            continue
        generator = torch.Generator().manual_seed(0)
        param = torch.nn.Parameter(torch.rand(size, generator=generator) - 0.5)
        param.grad = torch.rand(size, generator=generator) - 0.5
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            for variant in variants:
                optimizer = make_optimizer(variant, param)
                optimizer.step()  # warm-up: creates the state
                steps = 0
                start = time.perf_counter()
                while steps < 2 or time.perf_counter() - start < args.min_time:
                    optimizer.step()
                    steps += 1
                seconds = (time.perf_counter() - start) / steps
                print(json.dumps({"variant": variant_name(variant), "size": size, "threads": threads,
                                  "seconds_per_step": seconds, "elements_per_second": size / seconds}), flush=True)
                del optimizer
        del param


if __name__ == "__main__":
    main()
