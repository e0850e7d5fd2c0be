#!/usr/bin/env python3
"""PyTorch peer for ferry's training-throughput benchmarks (CPU and GPU): times GPT-2 training steps
of the same model ferry trains (tests/parity/gpt2_reference.py, imported, not copied) and prints one
JSON line.

  pytorch_train_step.py --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4
                        [--steps 5] [--threads N] [--lr 6e-4] [--seed 0] [--checkpoint-blocks]
                        [--device cpu|cuda] [--precision fp32|bf16] [--attention unfused|sdpa]
                        [--compile] [--memory-snapshot PATH]

--device cuda runs eager on the GPU (timed between torch.cuda.synchronize calls) and reports
torch.cuda.max_memory_allocated/reserved from before the model is built; --precision bf16 is PyTorch's
usual mixed precision (fp32 parameters and AdamW state, torch.autocast to bf16); --attention sdpa swaps
the reference's unfused attention for F.scaled_dot_product_attention (flash kernels, torch 2.x), the
strongest eager peer. Running out of GPU memory prints {"fits": false, ...} and exits 0, so a driver
can search for the largest model that trains.

--compile runs the model through torch.compile (its compile time falls in the first, untimed step, and
"compile_seconds" reports it). --memory-snapshot PATH (cuda) records PyTorch's allocator history
(torch.cuda.memory._record_memory_history) through the run and dumps it there (_dump_snapshot), and adds
torch.cuda.memory_stats' peaks ("memory_stats": allocated_bytes/reserved_bytes/requested_bytes
.all.peak) for a reader of the snapshot to be checked against.

--checkpoint-blocks wraps every block in torch.utils.checkpoint.checkpoint (use_reentrant=False,
the RNG state preserved): full activation recompute, PyTorch's way.

Each step: forward, backward, clip_grad_norm_(1.0), AdamW step (fused=False, foreach left at its
default), zero_grad(set_to_none=True), on a fresh random batch from a seeded generator. Output:
  {"system": "pytorch", "torch_version", "threads", "tokens_per_second" (batch*seq over the median
   step time, the first step excluded as warm-up when there is more than one), "step_seconds",
   "peak_rss_growth_bytes" (VmHWM at the end minus VmRSS just before the model is built; the
   high-water mark cannot be reset, so this includes nothing the process did before),
   "rss_before_bytes", "peak_rss_bytes", "parameters", "fits"}, and on cuda "peak_allocated_bytes",
   "peak_reserved_bytes", "device_name".
"""
import argparse
import importlib.util
import inspect
import json
import os
import statistics
import time

import torch

_REFERENCE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests",
                               "parity", "gpt2_reference.py")


def load_reference():
    path = os.path.normpath(_REFERENCE_PATH)
    spec = importlib.util.spec_from_file_location("gpt2_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def proc_status_bytes(field):
    """A 'kB' field of /proc/self/status (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def use_sdpa(ref):
    """The reference's attention through F.scaled_dot_product_attention (causal), same weights."""
    import torch.nn.functional as F

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    ref.Attention.forward = forward


def train(args, ref, device):
    config = ref.GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=args.heads,
                            n_positions=args.seq, vocab_size=args.vocab)
    model = ref.build_model(config, seed=args.seed).to(device)
    forward = torch.compile(model) if args.compile else model
    if args.checkpoint_blocks:
        from torch.utils.checkpoint import checkpoint
        for block in model.h:
            block.forward = lambda x, forward=block.forward: checkpoint(forward, x, use_reentrant=False)
    extra = {}
    if "fused" in inspect.signature(torch.optim.AdamW).parameters:  # AdamW has it from torch 2.0
        extra["fused"] = False
    optimizer = ref.make_adamw(model, args.lr, (0.9, 0.95), 1e-8, 0.1, **extra)
    generator = torch.Generator().manual_seed(args.seed + 1)
    cuda = device.type == "cuda"
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")

    step_seconds, losses = [], []
    for _ in range(args.steps):
        window = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator)
        inputs, targets = window[:, :-1].contiguous().to(device), window[:, 1:].contiguous().to(device)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with autocast:
            _, loss = forward(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        step_seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
    return model, step_seconds, losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-blocks", action="store_true", help="torch.utils.checkpoint around every block")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: torch.autocast mixed precision")
    parser.add_argument("--attention", choices=["unfused", "sdpa"], default="unfused")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (compiled in the untimed first step)")
    parser.add_argument("--memory-snapshot", default=None, help="cuda: dump PyTorch's memory snapshot of the run here")
    args = parser.parse_args()
    if args.memory_snapshot and args.device != "cuda":
        parser.error("--memory-snapshot records the cuda caching allocator: add --device cuda")
    if args.precision == "bf16" and args.device == "cpu":
        parser.error("--precision bf16 is for --device cuda (CPU autocast needs bf16 instructions this peer does not assume)")
    if args.steps < 1:
        parser.error("--steps must be at least 1")

    ref = load_reference()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.attention == "sdpa":
        use_sdpa(ref)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    if args.memory_snapshot:
        torch.cuda.memory._record_memory_history(stacks="python", max_entries=1000000)

    rss_before = proc_status_bytes("VmRSS")
    result = {"system": "pytorch", "torch_version": torch.__version__, "threads": torch.get_num_threads(),
              "device": args.device, "precision": args.precision, "attention": args.attention,
              "checkpoint_blocks": args.checkpoint_blocks, "batch": args.batch, "seq": args.seq}
    if cuda:
        result["device_name"] = torch.cuda.get_device_name()
    try:
        model, step_seconds, losses = train(args, ref, device)
    except getattr(torch.cuda, "OutOfMemoryError", MemoryError) as error:  # the largest-model search reads this
        result.update({"fits": False, "error": str(error).splitlines()[0]})
        if cuda:
            result.update({"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                           "peak_reserved_bytes": torch.cuda.max_memory_reserved()})
        print(json.dumps(result))
        return

    peak_rss = proc_status_bytes("VmHWM")
    timed = step_seconds[1:] if len(step_seconds) > 1 else step_seconds
    result.update({
        "fits": True,
        "tokens_per_second": args.batch * args.seq / statistics.median(timed),
        "step_seconds": step_seconds,
        "losses": losses,
        "peak_rss_growth_bytes": peak_rss - rss_before,
        "rss_before_bytes": rss_before,
        "peak_rss_bytes": peak_rss,
        "parameters": ref.count_parameters(model),
        "compile_seconds": step_seconds[0] if args.compile else 0,
    })
    if cuda:
        result.update({"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                       "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                       "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_ALLOC_CONF", ""))})
    if args.memory_snapshot:
        stats = torch.cuda.memory_stats()
        result["memory_stats"] = {key: stats.get(key + ".all.peak") for key in ("allocated_bytes", "reserved_bytes", "requested_bytes")}
        torch.cuda.memory._dump_snapshot(args.memory_snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
        result["memory_snapshot"] = args.memory_snapshot
    print(json.dumps(result))


if __name__ == "__main__":
    main()
