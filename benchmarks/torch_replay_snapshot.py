#!/usr/bin/env python3
"""PyTorch's caching allocator replaying a memory snapshot's trace on the GPU, the peer of
`ferry replay SNAPSHOT.pickle --device cuda`: every alloc event becomes torch.empty of its size (bytes, on
its stream's device), every free_requested deletes it, in order. Prints one JSON line: the peaks of
torch.cuda.memory_stats over the replay. Set PYTORCH_CUDA_ALLOC_CONF (expandable_segments:True) to compare
settings; each setting needs its own process.

    python3 benchmarks/torch_replay_snapshot.py SNAPSHOT.pickle
"""
import json
import os
import pickle
import sys

import torch


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], "rb") as file:
        snapshot = pickle.load(file)
    traces = snapshot.get("device_traces") or []
    if not traces or not traces[0]:
        print(f"{sys.argv[1]}: no device trace (record with torch.cuda.memory._record_memory_history)", file=sys.stderr)
        return 1
    torch.cuda.init()
    torch.cuda.reset_peak_memory_stats()
    live = {}
    allocations = frees = unknown_frees = 0
    for event in traces[0]:
        action = event["action"]
        if action == "alloc":
            live[event["addr"]] = torch.empty(event["size"], dtype=torch.uint8, device="cuda")
            allocations += 1
        elif action == "free_requested":
            if live.pop(event["addr"], None) is None:
                unknown_frees += 1  # live before the recording started
            else:
                frees += 1
    stats = torch.cuda.memory_stats()
    print(json.dumps({
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "events": len(traces[0]),
        "allocations": allocations,
        "frees": frees,
        "unknown_frees": unknown_frees,
        "peak_allocated": stats["allocated_bytes.all.peak"],
        "peak_reserved": stats["reserved_bytes.all.peak"],
        "num_device_alloc": stats.get("num_device_alloc", 0),
        "num_alloc_retries": stats["num_alloc_retries"],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
