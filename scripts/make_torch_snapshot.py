#!/usr/bin/env python3
"""Writes PyTorch memory snapshots (the format of torch.cuda.memory._dump_snapshot: a pickle of plain
dicts and lists, `segments` with their `blocks` and `device_traces` of alloc, free_requested,
free_completed, segment_alloc, segment_map, segment_unmap, snapshot and oom entries with frames) of a small synthetic training run
whose peaks are known, the RMM logging CSV of the same allocations, and a few broken snapshots.
Standard library only (pickle), so tests need nothing new.

  scripts/make_torch_snapshot.py OUT_DIR

writes training.pickle (+ .csv, .expected.json), ring.pickle (the same run with the oldest events
dropped, as PyTorch's ring buffer drops them; + .expected.json), expandable.pickle (an expandable
segment's segment_map and segment_unmap, and an oom; + .csv, .expected.json), double-free.pickle and
huge-size.pickle.
"""
import json
import os
import pickle
import sys

KIB, MIB = 1024, 1024 * 1024
SMALL_SEGMENT = 2 * MIB
BASE = 0x7F0000000000
TORCH = "/usr/lib/python3/dist-packages/torch"

FRAMES = {
    "parameters": [(f"{TORCH}/nn/modules/module.py", 1160, "convert"), (f"{TORCH}/nn/modules/module.py", 804, "_apply"),
                   (f"{TORCH}/nn/modules/module.py", 1174, "to"), ("/work/train.py", 70, "main")],
    "activations": [("/work/model.py", 41, "forward"), (f"{TORCH}/nn/modules/module.py", 1527, "_call_impl"),
                    ("/work/train.py", 88, "train_step")],
    "gradients": [(f"{TORCH}/autograd/graph.py", 744, "_engine_run_backward"), (f"{TORCH}/autograd/__init__.py", 267, "backward"),
                  (f"{TORCH}/_tensor.py", 522, "backward"), ("/work/train.py", 91, "train_step")],
    "optimizer_states": [(f"{TORCH}/optim/adamw.py", 480, "_single_tensor_adamw"), (f"{TORCH}/optim/adamw.py", 187, "step"),
                         ("/work/train.py", 95, "train_step")],
    "uncategorized": [("/work/data.py", 12, "get_batch"), ("/work/train.py", 86, "train_step")],
    "free": [("/work/train.py", 97, "train_step")],
}


def frames(kind):
    return [{"filename": f, "line": line, "name": name} for f, line, name in FRAMES[kind]]


def round_size(size):
    return max(512, (size + 511) // 512 * 512)


class Allocator:
    """A small stand-in for PyTorch's caching allocator: requests up to 1 MiB are carved from 2 MiB
    small segments (never reused once freed); a larger one takes the start of a segment of PyTorch's
    large-pool size for it, cached on free and reused whole by a request of the same segment size."""

    def __init__(self):
        self.trace, self.segments, self.live, self.next_address = [], [], {}, BASE
        self.small, self.cached = None, []
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.peak_breakdown, self.peak_event = {}, 0
        self.csv = ["Thread,Time,Action,Pointer,Size,Stream"]

    def event(self, action, address, size, kind=None, **extra):
        entry = {"action": action, "addr": address, "size": size, "stream": 0,
                 "time_us": 1_700_000_000_000_000 + 10 * len(self.trace), "frames": frames(kind) if kind else []}
        entry.update(extra)
        self.trace.append(entry)

    def new_segment(self, size, small):
        segment = {"address": self.next_address, "total_size": size, "small": small, "used": 0}
        self.next_address += size + SMALL_SEGMENT  # a gap between segments, as separate cudaMallocs have
        self.segments.append(segment)
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.event("segment_alloc", segment["address"], size)
        return segment

    def alloc(self, requested, kind):
        size = round_size(requested)
        if size <= MIB:
            if self.small is None or self.small["used"] + size > SMALL_SEGMENT:
                self.small = self.new_segment(SMALL_SEGMENT, True)
            address = self.small["address"] + self.small["used"]
            self.small["used"] += size
        else:
            # PyTorch's large-pool segment sizes: 20 MiB below 10 MiB, else rounded up to 2 MiB.
            segment_size = 20 * MIB if size < 10 * MIB else (size + SMALL_SEGMENT - 1) // SMALL_SEGMENT * SMALL_SEGMENT
            reuse = [s for s in self.cached if s["total_size"] == segment_size]
            segment = reuse[0] if reuse else self.new_segment(segment_size, False)
            if reuse:
                self.cached.remove(segment)
            address = segment["address"]
        self.live[address] = (size, requested, kind)
        self.allocated += size
        self.event("alloc", address, size, kind)
        self.csv.append(f"1,{len(self.trace)},allocate,{hex(address)},{size},0")
        if self.allocated > self.peak_allocated:
            self.peak_allocated, self.peak_event = self.allocated, len(self.trace)
            self.peak_breakdown = {}
            for each_size, _, each_kind in self.live.values():
                self.peak_breakdown[each_kind] = self.peak_breakdown.get(each_kind, 0) + each_size
            self.peak_segments = {}  # per segment kind: [segments, reserved bytes, unallocated bytes]
            for segment in self.segments:
                start, end = segment["address"], segment["address"] + segment["total_size"]
                used = sum(size for a, (size, _, _) in self.live.items() if start <= a < end)
                totals = self.peak_segments.setdefault("small" if segment["small"] else "large", [0, 0, 0])
                totals[0] += 1
                totals[1] += segment["total_size"]
                totals[2] += segment["total_size"] - used
        return address

    def free(self, address):
        size = self.live.pop(address)[0]
        self.allocated -= size
        self.event("free_requested", address, size, "free")
        self.event("free_completed", address, size, "free")
        self.csv.append(f"1,{len(self.trace)},free,{hex(address)},{size},0")
        if size > MIB:
            self.cached.append(next(s for s in self.segments if s["address"] == address))

    def segments_now(self):
        result = []
        for segment in self.segments:
            start, end = segment["address"], segment["address"] + segment["total_size"]
            blocks, cursor = [], start
            for address in sorted(a for a in self.live if start <= a < end):
                size, requested, kind = self.live[address]
                if address > cursor:
                    blocks.append({"address": cursor, "size": address - cursor, "requested_size": 0, "state": "inactive", "frames": []})
                blocks.append({"address": address, "size": size, "requested_size": requested, "state": "active_allocated",
                               "frames": frames(kind)})
                cursor = address + size
            if cursor < end:
                blocks.append({"address": cursor, "size": end - cursor, "requested_size": 0, "state": "inactive", "frames": []})
            allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
            result.append({"device": 0, "address": start, "total_size": segment["total_size"], "stream": 0,
                           "segment_type": "small" if segment["small"] else "large", "segment_pool_id": (0, 0),
                           "allocated_size": allocated, "active_size": allocated,
                           "requested_size": sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated"),
                           "is_expandable": False, "frames": [], "blocks": blocks})
        return result


def training_run():
    """Parameters loaded, then two steps of forward, backward and AdamW over four layers."""
    allocator = Allocator()
    weights = [3 * MIB + 1000, 5 * MIB, 3 * MIB + 1000, 700 * KIB]
    params = [allocator.alloc(size, "parameters") for size in weights]
    params += [allocator.alloc(4 * KIB, "parameters") for _ in weights]  # biases
    states = []
    for step in range(2):
        batch = allocator.alloc(64 * KIB, "uncategorized")
        activations = [allocator.alloc(size + 2 * MIB, "activations") for size in weights]
        grads = []
        for size, activation in zip(reversed(weights), reversed(activations)):
            grads.append(allocator.alloc(size, "gradients"))
            scratch = allocator.alloc(size // 2, "gradients")
            allocator.free(scratch)
            allocator.free(activation)
        allocator.free(batch)
        if step == 0:
            states = [allocator.alloc(size, "optimizer_states") for size in weights for _ in range(2)]
        scratch = allocator.alloc(MIB + 512, "optimizer_states")
        allocator.free(scratch)
        for grad in grads:
            allocator.free(grad)  # zero_grad(set_to_none=True)
    allocator.event("snapshot", 0, 0)
    assert params and states
    return allocator


def expandable_run():
    """One expandable segment growing by mapped 20 MiB pages (segment_map), an allocation that runs out
    of memory (oom), and the pages unmapped again (segment_unmap). Returns the snapshot, the RMM CSV
    lines and what ferry must report."""
    base, trace, csv, clock = 0x7F8000000000, [], ["Thread,Time,Action,Pointer,Size,Stream"], [0]

    def event(action, address, size, kind=None, **extra):
        clock[0] += 10
        entry = {"action": action, "addr": address, "size": size, "stream": 0, "time_us": 1_700_000_000_000_000 + clock[0],
                 "frames": frames(kind) if kind else []}
        entry.update(extra)
        trace.append(entry)

    def alloc(address, size):
        event("alloc", address, size, "activations")
        csv.append(f"1,{clock[0]},allocate,{hex(address)},{size},0")

    def free(address, size):
        event("free_requested", address, size, "free")
        event("free_completed", address, size, "free")
        csv.append(f"1,{clock[0]},free,{hex(address)},{size},0")

    event("segment_map", base, 20 * MIB)
    alloc(base, 8 * MIB)
    alloc(base + 8 * MIB, 10 * MIB)
    event("segment_map", base + 20 * MIB, 20 * MIB)
    alloc(base + 18 * MIB, 15 * MIB)  # the peak: 33 MiB of 40 MiB mapped
    free(base, 8 * MIB)
    event("oom", 0, 64 * MIB, "activations", device_free=MIB)
    csv.append(f"1,{clock[0]},allocate failure,0x0,{64 * MIB},0")
    free(base + 8 * MIB, 10 * MIB)
    free(base + 18 * MIB, 15 * MIB)
    event("segment_unmap", base + 20 * MIB, 20 * MIB)
    segment = {"device": 0, "address": base, "total_size": 20 * MIB, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
               "allocated_size": 0, "active_size": 0, "requested_size": 0, "is_expandable": True, "frames": [],
               "blocks": [{"address": base, "size": 20 * MIB, "requested_size": 0, "state": "inactive", "frames": []}]}
    expected = {"peak_allocated": 33 * MIB, "peak_reserved": 40 * MIB, "at_peak": {"activations": 33 * MIB}, "ooms": 1,
                "segments_at_peak": {"expandable": [1, 40 * MIB, 7 * MIB]}}
    return {"segments": [segment], "device_traces": [trace]}, csv, expected


def snapshot(allocator, first_event=0):
    return {"segments": allocator.segments_now(), "device_traces": [allocator.trace[first_event:]],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1}}


def write(path, value):
    with open(path, "wb") as f:
        pickle.dump(value, f, protocol=4)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    run = training_run()
    write(os.path.join(out, "training.pickle"), snapshot(run))
    with open(os.path.join(out, "training.csv"), "w") as f:
        f.write("\n".join(run.csv) + "\n")
    expected = {"peak_allocated": run.peak_allocated, "peak_reserved": run.peak_reserved, "at_peak": run.peak_breakdown,
                "events": len(run.trace), "peak_event": run.peak_event, "segments_at_peak": run.peak_segments}
    with open(os.path.join(out, "training.expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    # The ring buffer kept only the newest events: the parameters' allocations are gone from the trace.
    dropped = 30
    assert run.peak_event > dropped
    write(os.path.join(out, "ring.pickle"), snapshot(run, dropped))
    with open(os.path.join(out, "ring.expected.json"), "w") as f:
        json.dump({"peak_allocated": run.peak_allocated, "peak_reserved": run.peak_reserved, "dropped": dropped,
                   "parameters_at_peak": run.peak_breakdown["parameters"]}, f, indent=1, sort_keys=True)
    expandable, csv, expected = expandable_run()
    write(os.path.join(out, "expandable.pickle"), expandable)
    with open(os.path.join(out, "expandable.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    with open(os.path.join(out, "expandable.expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    # Broken ones: a second free of a freed address, and a size no device has.
    broken = snapshot(run)
    trace = broken["device_traces"][0]
    first_free = next(i for i, e in enumerate(trace) if e["action"] == "free_requested")
    trace.insert(first_free + 2, dict(trace[first_free]))
    write(os.path.join(out, "double-free.pickle"), broken)
    huge = snapshot(run)
    huge["device_traces"][0][5]["size"] = 1 << 62
    write(os.path.join(out, "huge-size.pickle"), huge)


if __name__ == "__main__":
    main()
