"""A small model of PyTorch's CUDA caching allocator (fixed segments, one stream, default settings: 512-byte
rounding, 2 MiB small / 20 MiB large segments, split rules) replayed over a snapshot's trace, once with the
segments at the addresses the trace recorded and once at increasing addresses of its own: which of the two
gives torch.cuda.memory_stats' allocated peak shows whether equal free blocks are chosen by address.

  /usr/bin/python3 dev/torch_allocator_model.py [tests/data/snapshots/gpt2_h200.pickle]
"""
import bisect
import pickle
import sys

s = pickle.load(open(sys.argv[1] if len(sys.argv) > 1 else 'tests/data/snapshots/gpt2_h200.pickle', 'rb'))
trace = s['device_traces'][0]
MIN, SMALL, SBUF, LBUF, MINLARGE, RLARGE = 512, 1 << 20, 2 << 20, 20 << 20, 10 << 20, 2 << 20
def rnd(n): return MIN if n < MIN else (n + MIN - 1) // MIN * MIN
def alloc_size(n): return SBUF if n <= SMALL else (LBUF if n < MINLARGE else (n + RLARGE - 1) // RLARGE * RLARGE)
def run(real_addresses):
    segs = [e for e in trace if e['action'] == 'segment_alloc']
    seg_i = 0
    next_synth = 1 << 40
    free = {True: [], False: []}   # pool small? -> sorted list of (size, addr)
    blocks = {}  # addr -> [size, allocated, seg_start, seg_end, small]
    live = {}    # trace addr -> sim addr
    allocated = peak = reserved = peak_res = 0
    for e in trace:
        a = e['action']
        if a == 'alloc':
            size = rnd(e['size']); small = size <= SMALL
            lst = free[small]
            i = bisect.bisect_left(lst, (size, 0))
            if i < len(lst):
                bsize, addr = lst.pop(i)
            else:
                asz = alloc_size(size)
                if real_addresses:
                    seg = segs[seg_i]; seg_i += 1
                    assert seg['size'] == asz, (seg['size'], asz)
                    addr = seg['addr']
                else:
                    addr = next_synth; next_synth += asz + (1 << 30)
                blocks[addr] = [asz, False, addr, addr + asz, small]
                bsize = asz; reserved += asz; peak_res = max(peak_res, reserved)
            b = blocks[addr]
            rem = bsize - size
            split = rem >= MIN if small else rem > SMALL
            if split:
                blocks[addr + size] = [rem, False, b[2], b[3], small]
                bisect.insort(lst, (rem, addr + size))
                b[0] = size
            b[1] = True
            allocated += b[0]; peak = max(peak, allocated)
            live[e['addr']] = addr
        elif a == 'free_requested':
            addr = live.pop(e['addr'])
            b = blocks[addr]; allocated -= b[0]; b[1] = False
            small = b[4]; lst = free[small]
            # merge with next
            nxt = addr + b[0]
            if nxt < b[3] and nxt in blocks and not blocks[nxt][1]:
                lst.remove((blocks[nxt][0], nxt)); b[0] += blocks[nxt][0]; del blocks[nxt]
            # merge with prev: the free block ending where this one starts (a scan: small traces)
            if addr > b[2]:
                cands = [pa for pa in blocks if b[2] <= pa < addr and pa + blocks[pa][0] == addr]
                if cands and not blocks[cands[0]][1]:
                    pa = cands[0]; lst.remove((blocks[pa][0], pa)); blocks[pa][0] += b[0]; del blocks[addr]; addr = pa
            bisect.insort(lst, (blocks[addr][0], addr))
    return peak, peak_res
for real in (True, False):
    print('real addresses' if real else 'synthetic increasing addresses', run(real))
print('gpt2_h200.expected.json: torch allocated 9532247040, reserved 11869880320')
