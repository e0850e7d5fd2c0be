#!/usr/bin/env python3
"""torch.optim.AdamW step time on CPU (Debian's python3-torch), the peer of cpu_adam_benchmark.

  cpu_adam_torch.py [--sizes 1e6,1e7,1e8,1e9] [--threads 1,2] [--min-time 0.5]

One float32 parameter of each size with a gradient, weight decay 0.01, foreach=False and
foreach=True, torch.set_num_threads(threads). One warm-up step, then steps until min-time seconds
have passed (at least 2); prints one JSON object per line: size, threads, foreach,
seconds_per_step, elements_per_second. A size whose tensors (4 of the size, plus 2 of temporaries
torch makes in the step) do not fit in MemAvailable is printed with "skipped" and the reason.
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7,1e8,1e9")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--min-time", type=float, default=0.5)
    args = parser.parse_args()
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
            for foreach in (False, True):
                optimizer = torch.optim.AdamW([param], lr=3e-4, weight_decay=0.01, foreach=foreach)
                optimizer.step()  # warm-up: creates the state
                steps = 0
                start = time.perf_counter()
                while steps < 2 or time.perf_counter() - start < args.min_time:
                    optimizer.step()
                    steps += 1
                seconds = (time.perf_counter() - start) / steps
                print(json.dumps({"size": size, "threads": threads, "foreach": foreach, "seconds_per_step": seconds,
                                  "elements_per_second": size / seconds}), flush=True)
                del optimizer
        del param


if __name__ == "__main__":
    main()
