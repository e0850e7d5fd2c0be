#!/usr/bin/env python3
"""Writes an RMM logging CSV (Thread,Time,Action,Pointer,Size,Stream) with the allocation sequence of
GPT-2 training steps as an eager framework issues it: parameters once; per step the forward pass
saving each block's activations, the logits and loss, the backward pass freeing saved activations
in reverse while gradients appear, AdamW state created at the first step, and gradients released
at zero_grad(set_to_none=True). The sequence length may change every step (--seq 128:512), which is
what fragments a caching allocator. Only the standard library; deterministic for a given --seed.

Example: scripts/make_gpt_trace.py --layers 4 --hidden 256 --heads 4 --batch 4 --seq 64:256 \
             --steps 6 --output data/traces/gpt2-tiny-train.csv
"""
import argparse
import random
import sys


class Trace:
    def __init__(self):
        self.rows = []
        self.next_pointer = 0x7F0000000000
        self.live = {}
        self.clock_us = 0

    def allocate(self, size):
        size = int(size)
        pointer = self.next_pointer
        self.next_pointer += (size + 511) // 512 * 512 + 512  # distinct, never reused
        self.live[pointer] = size
        self._row("allocate", pointer, size)
        return pointer

    def free(self, pointer):
        size = self.live.pop(pointer)
        self._row("free", pointer, size)

    def _row(self, action, pointer, size):
        self.clock_us += 3
        seconds, micros = divmod(self.clock_us, 1_000_000)
        minutes, seconds = divmod(seconds, 60)
        time = f"12:{minutes:02d}:{seconds:02d}.{micros:06d}"
        self.rows.append(f"1,{time},{action},0x{pointer:x},{size},0")


def parameter_shapes(layers, hidden, vocab, positions):
    shapes = [("wte", vocab * hidden), ("wpe", positions * hidden)]
    for layer in range(layers):
        h = hidden
        shapes += [(f"h.{layer}.ln_1.weight", h), (f"h.{layer}.ln_1.bias", h),
                   (f"h.{layer}.attn.c_attn.weight", h * 3 * h), (f"h.{layer}.attn.c_attn.bias", 3 * h),
                   (f"h.{layer}.attn.c_proj.weight", h * h), (f"h.{layer}.attn.c_proj.bias", h),
                   (f"h.{layer}.ln_2.weight", h), (f"h.{layer}.ln_2.bias", h),
                   (f"h.{layer}.mlp.c_fc.weight", h * 4 * h), (f"h.{layer}.mlp.c_fc.bias", 4 * h),
                   (f"h.{layer}.mlp.c_proj.weight", 4 * h * h), (f"h.{layer}.mlp.c_proj.bias", h)]
    shapes += [("ln_f.weight", hidden), ("ln_f.bias", hidden)]
    return shapes


def training_step(trace, args, parameters, adam_state, seq):
    f = 4  # fp32 bytes
    B, T, C, H, V = args.batch, seq, args.hidden, args.heads, args.vocab
    BT = B * T
    tokens = trace.allocate(BT * 8)
    targets = trace.allocate(BT * 8)
    x = trace.allocate(BT * C * f)  # token + position embedding
    saved = []  # per block: what backward needs
    for _ in range(args.layers):
        ln1 = trace.allocate(BT * C * f); ln1_stats = trace.allocate(2 * BT * f)
        qkv = trace.allocate(BT * 3 * C * f)
        scores = trace.allocate(B * H * T * T * f)
        probabilities = trace.allocate(B * H * T * T * f)
        trace.free(scores)  # the softmax input is not needed by backward
        attention = trace.allocate(BT * C * f)
        projection = trace.allocate(BT * C * f)
        residual1 = trace.allocate(BT * C * f)
        trace.free(projection)
        ln2 = trace.allocate(BT * C * f); ln2_stats = trace.allocate(2 * BT * f)
        fc = trace.allocate(BT * 4 * C * f)
        gelu = trace.allocate(BT * 4 * C * f)
        projection2 = trace.allocate(BT * C * f)
        residual2 = trace.allocate(BT * C * f)
        trace.free(projection2)
        saved.append([x, ln1, ln1_stats, qkv, probabilities, attention, residual1, ln2, ln2_stats, fc, gelu])
        x = residual2
    lnf = trace.allocate(BT * C * f); lnf_stats = trace.allocate(2 * BT * f)
    logits = trace.allocate(BT * V * f)
    log_probabilities = trace.allocate(BT * V * f)
    loss = trace.allocate(f)
    # Backward.
    grad_log_probabilities = trace.allocate(BT * V * f)
    trace.free(log_probabilities)
    grad_logits = trace.allocate(BT * V * f)
    trace.free(grad_log_probabilities)
    trace.free(logits)
    grads = {}

    def gradient(name):
        if name not in grads:
            grads[name] = trace.allocate(dict(parameters)[name] * f)

    gradient("wte")
    grad_x = trace.allocate(BT * C * f)
    trace.free(grad_logits)
    gradient("ln_f.weight"); gradient("ln_f.bias")
    trace.free(lnf); trace.free(lnf_stats); trace.free(x)
    for layer in reversed(range(args.layers)):
        x_in, ln1, ln1_stats, qkv, probabilities, attention, residual1, ln2, ln2_stats, fc, gelu = saved[layer]
        p = f"h.{layer}."
        gradient(p + "mlp.c_proj.weight"); gradient(p + "mlp.c_proj.bias")
        grad_gelu = trace.allocate(BT * 4 * C * f)
        trace.free(gelu)
        grad_fc = trace.allocate(BT * 4 * C * f)
        trace.free(grad_gelu); trace.free(fc)
        gradient(p + "mlp.c_fc.weight"); gradient(p + "mlp.c_fc.bias")
        grad_ln2 = trace.allocate(BT * C * f)
        trace.free(grad_fc)
        gradient(p + "ln_2.weight"); gradient(p + "ln_2.bias")
        grad_residual1 = trace.allocate(BT * C * f)
        trace.free(grad_ln2); trace.free(ln2); trace.free(ln2_stats); trace.free(residual1)
        gradient(p + "attn.c_proj.weight"); gradient(p + "attn.c_proj.bias")
        grad_attention = trace.allocate(BT * C * f)
        trace.free(attention)
        grad_probabilities = trace.allocate(B * H * T * T * f)
        grad_scores = trace.allocate(B * H * T * T * f)
        trace.free(grad_probabilities); trace.free(probabilities)
        grad_qkv = trace.allocate(BT * 3 * C * f)
        trace.free(grad_scores); trace.free(grad_attention); trace.free(qkv)
        gradient(p + "attn.c_attn.weight"); gradient(p + "attn.c_attn.bias")
        grad_ln1 = trace.allocate(BT * C * f)
        trace.free(grad_qkv)
        gradient(p + "ln_1.weight"); gradient(p + "ln_1.bias")
        grad_input = trace.allocate(BT * C * f)
        trace.free(grad_ln1); trace.free(ln1); trace.free(ln1_stats); trace.free(x_in)
        trace.free(grad_x); trace.free(grad_residual1)
        grad_x = grad_input
    gradient("wpe")
    trace.free(grad_x); trace.free(tokens); trace.free(targets)
    # AdamW: state created at the first step, a temporary per parameter for the update.
    for name, count in parameters:
        if name not in adam_state:
            adam_state[name] = (trace.allocate(count * f), trace.allocate(count * f))
        scratch = trace.allocate(count * f)
        trace.free(scratch)
    trace.free(loss)
    for pointer in grads.values():  # zero_grad(set_to_none=True)
        trace.free(pointer)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", default="64:256", help="a length, or MIN:MAX drawn per step")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", default="-")
    args = parser.parse_args()
    low, _, high = args.seq.partition(":")
    low, high = int(low), int(high or low)
    if low <= 0 or high < low or args.hidden % args.heads:
        parser.error("--seq must be N or MIN:MAX with 0 < MIN <= MAX, and --hidden divisible by --heads")
    rng = random.Random(args.seed)
    trace = Trace()
    parameters = parameter_shapes(args.layers, args.hidden, args.vocab, high)
    for _, count in parameters:
        trace.allocate(count * 4)
    adam_state = {}
    for _ in range(args.steps):
        training_step(trace, args, parameters, adam_state, rng.randint(low, high))
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    out.write("Thread,Time,Action,Pointer,Size,Stream\n")
    out.write("\n".join(trace.rows) + "\n")


if __name__ == "__main__":
    main()
