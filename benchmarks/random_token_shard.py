#!/usr/bin/env python3
"""Writes an llm.c token shard (magic 20240520, version 1) of COUNT uniform random token ids below
VOCAB from a fixed seed, for the throughput benchmarks (throughput does not depend on the text).

  random_token_shard.py OUT [COUNT (default 2^20)] [VOCAB (default 50257)]
"""
import random
import struct
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 50257
    rng = random.Random(0)
    tokens = [rng.randrange(vocab) for _ in range(count)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
        f.write(struct.pack("<%dH" % count, *tokens))


if __name__ == "__main__":
    main()
