#!/usr/bin/env python3
"""What pytorch.org/memory_viz's Allocator State History needs of a snapshot, checked without a browser:
it starts from the segments and their allocated blocks at the end and walks the trace backwards (a
free_requested directly followed by its free_completed counts as one free), re-adding freed blocks and
released segments (unmapped pages join the pages they touch), removing allocated blocks and segments; at every step each block must lie
inside a segment, a segment_alloc must name a segment there and a segment_map's pages must lie in one.
This mirrors our reading of MemoryViz.js (simulate_memory); it is not that code.

  memory_viz_replay.py SNAPSHOT.pickle   (exit 0: consistent; prints the number of steps checked)
"""
import bisect
import pickle
import sys


def check(snapshot):
    segments = []  # [address, size], kept sorted
    blocks = {}
    for segment in snapshot["segments"]:
        segments.append([segment["address"], segment["total_size"]])
        address = segment["address"]
        for block in segment["blocks"]:
            if block["state"] in ("active_allocated", "active_pending_free", "active_awaiting_free"):
                blocks[address] = block["size"]
            address += block["size"]
        assert address == segment["address"] + segment["total_size"], f"blocks do not tile segment {segment['address']:#x}"
    segments.sort()

    def containing(address, size):
        i = bisect.bisect_right([s[0] for s in segments], address) - 1
        return i if i >= 0 and address + size <= segments[i][0] + segments[i][1] else None

    trace = []
    for event in snapshot["device_traces"][0]:
        if event["action"] == "free_completed" and trace and trace[-1]["action"] == "free_requested" and trace[-1]["addr"] == event["addr"]:
            trace[-1] = dict(trace[-1], action="free")
            continue
        trace.append(event)
    for step, event in enumerate(reversed(trace)):
        action, address, size = event["action"], event["addr"], event["size"]
        if action in ("free", "free_completed"):
            blocks[address] = size
        elif action == "alloc":
            blocks.pop(address, None)
        elif action == "segment_free":
            bisect.insort(segments, [address, size])
        elif action == "segment_unmap":  # pages mapped again join the segment they touch
            bisect.insort(segments, [address, size])
            i = segments.index([address, size])
            if i + 1 < len(segments) and address + size == segments[i + 1][0]:
                segments[i][1] += segments.pop(i + 1)[1]
            if i > 0 and segments[i - 1][0] + segments[i - 1][1] == address:
                segments[i - 1][1] += segments.pop(i)[1]
        elif action == "segment_alloc":
            match = [i for i, s in enumerate(segments) if s[0] == address]
            assert match, f"step {step}: segment_alloc of {address:#x}, which is not a segment then"
            segments.pop(match[0])
        elif action == "segment_map":
            i = containing(address, size)
            assert i is not None, f"step {step}: segment_map of {address:#x} outside every segment"
            start, length = segments.pop(i)
            if address > start:
                bisect.insort(segments, [start, address - start])
            if address + size < start + length:
                bisect.insort(segments, [address + size, start + length - address - size])
        for block_address, block_size in blocks.items():
            assert containing(block_address, block_size) is not None, \
                f"step {step} ({action} {address:#x}): block {block_address:#x} lies in no segment"
    return len(trace)


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        print(f"{sys.argv[1]}: {check(pickle.load(f))} steps replayed as memory_viz does")
