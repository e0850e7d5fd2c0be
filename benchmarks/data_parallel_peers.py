#!/usr/bin/env python3
"""PyTorch's data parallelism on CPU ranks, the peer for ferry's ZeRO stages 0-3 (issue 28): times
training steps of the same GPT ferry trains (tests/parity/gpt2_reference.py, imported, not copied),
one process per rank over gloo, and prints one JSON line from rank 0.

  torchrun --standalone --nproc-per-node N benchmarks/data_parallel_peers.py --mode MODE
      --layers 4 --hidden 512 --heads 8 --vocab 8192 --seq 256 --batch 4 [--positions 1024]
      [--steps 5] [--threads 1] [--lr 1e-4] [--seed 0]

Needs PyTorch 2.6 or later (FSDP2's torch.distributed.fsdp.fully_shard), e.g. a venv from PyPI;
benchmarks/data_parallel_peers.sh drives it beside ferry. Modes, by the ZeRO stage each matches:
  plain          no wrapper (world 1 only): the baseline for scaling
  ddp            DistributedDataParallel, gradients all-reduced (ZeRO 0)
  zero1          DDP + torch.distributed.optim.ZeroRedundancyOptimizer around AdamW: optimizer state
                 partitioned, each rank steps its share and broadcasts it (ZeRO 1)
  fsdp2          fully_shard on every block, then the root, reshard_after_forward=False: parameters
                 gathered once per step and kept through backward, gradients reduce-scattered,
                 optimizer state and gradients partitioned (ZeRO 2)
  fsdp2-reshard  the same with reshard_after_forward=True: parameters freed after forward and
                 gathered again for backward (ZeRO 3)

Each step, as benchmarks/pytorch_train_step.py's: forward, backward, clip_grad_norm_(1.0) (on FSDP2's
DTensor gradients torch.nn.utils.clip_grad_norm_ reduces the sharded norm across ranks itself),
AdamW step (fused=False, betas 0.9/0.95, weight decay 0.1 on tensors of dim >= 2, constant lr),
zero_grad(set_to_none=True), fp32, on a fresh random [batch, seq+1] window drawn by each rank from its
own generator seeded seed + rank (no gradient accumulation: the global batch is world x batch).
A step is timed between two barriers (dist.barrier before the forward and after zero_grad), so it
is the slowest rank's step; the timings reported are rank 0's.

Output (rank 0, one line): {"system": "pytorch", "mode", "world", "threads", "torch_version",
  "parameters", "batch", "seq", "tokens_per_second" (world x batch x seq over the median step time,
  the first step excluded as warm-up when there is more than one), "step_seconds", "losses" (rank
  0's), "rank_peak_rss_growth_bytes" (per rank: VmHWM at the end minus VmRSS just before the model is
  built, after the process group exists and the modules the step imports lazily are imported: building
  the first optimizer imports torch._dynamo, ~160 MiB, reported apart as "rank_import_rss_bytes" so
  the growth is what training allocates; the high-water mark cannot be reset, so the growth counts
  nothing the process did before), "rank_peak_rss_bytes" (VmHWM), "rank_rss_before_bytes"}.
"""
import argparse
import importlib
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_train_step import load_reference, proc_status_bytes  # noqa: E402  the one-process peer's model loader and RSS reader

MODES = ("plain", "ddp", "zero1", "fsdp2", "fsdp2-reshard")
BETAS, EPS, WEIGHT_DECAY = (0.9, 0.95), 1e-8, 0.1


def import_lazy_modules(mode):
    """Import what the step imports lazily, before the baseline RSS: the first optimizer built imports
    torch._dynamo (and sympy, mpmath), about 160 MiB of code and data on torch 2.15, which would
    otherwise count as training memory (a 100k-parameter model would "grow" 180 MiB). Returns nothing;
    main() reports the RSS this adds as rank_import_rss_bytes."""
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-4, fused=False)
    if mode in ("ddp", "zero1"):
        modules = ("torch.nn.parallel", "torch.distributed.optim")  # DDP, ZeroRedundancyOptimizer
    elif mode.startswith("fsdp2"):
        modules = ("torch.distributed.device_mesh", "torch.distributed.fsdp")  # fully_shard
    else:
        modules = ()
    for module in modules:
        importlib.import_module(module)


def make_adamw(ref, model, lr):
    """AdamW exactly as the reference builds it (ref.make_adamw: decay on tensors of dim >= 2)."""
    return ref.make_adamw(model, lr, BETAS, EPS, WEIGHT_DECAY, fused=False)


def wrap(args, ref, model, world):
    """The model as the mode trains it (what forward is called on) and its optimizer."""
    if args.mode == "plain":
        return model, make_adamw(ref, model, args.lr)
    if args.mode in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel
        wrapped = DistributedDataParallel(model)
        if args.mode == "ddp":
            optimizer = make_adamw(ref, model, args.lr)
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            # The reference's two groups (its AdamW holds no state until a step, so this costs nothing).
            groups = [{"params": g["params"], "weight_decay": g["weight_decay"]}
                      for g in make_adamw(ref, model, args.lr).param_groups]
            optimizer = ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW,
                                                lr=args.lr, betas=BETAS, eps=EPS, fused=False)
        return wrapped, optimizer
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    reshard = args.mode == "fsdp2-reshard"
    for block in model.h:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)  # wte (tied to the logits), wpe, ln_f
    # The groups are built after sharding, so the optimizer holds the DTensor shards (ZeRO 2/3's partition).
    return model, make_adamw(ref, model, args.lr)


def train(args, ref, rank, world):
    config = ref.GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=args.heads,
                            n_positions=args.positions or args.seq, vocab_size=args.vocab)
    model = ref.build_model(config, seed=args.seed)  # the same initial weights on every rank
    parameters = ref.count_parameters(model)
    forward, optimizer = wrap(args, ref, model, world)
    generator = torch.Generator().manual_seed(args.seed + rank)
    step_seconds, losses = [], []
    for _ in range(args.steps):
        window = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator)
        inputs, targets = window[:, :-1].contiguous(), window[:, 1:].contiguous()
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        _, loss = forward(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if world > 1:
            dist.barrier()
        step_seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
    return parameters, step_seconds, losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--positions", type=int, default=None,
                        help="rows of the position table (default: --seq; ferry's gpt2 preset has 1024)")
    parser.add_argument("--batch", type=int, required=True, help="micro-batch per rank (sequences)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if args.mode == "plain" and world != 1:
        parser.error("--mode plain is one process: launch it without torchrun or with --nproc-per-node 1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    elif args.mode != "plain":
        parser.error(f"--mode {args.mode} needs torchrun (it sets RANK, WORLD_SIZE, MASTER_ADDR)")

    ref = load_reference()
    rss_start = proc_status_bytes("VmRSS")
    import_lazy_modules(args.mode)
    rss_before = proc_status_bytes("VmRSS")
    parameters, step_seconds, losses = train(args, ref, rank, world)
    peak_rss = proc_status_bytes("VmHWM")

    mine = {"rss_start": rss_start, "rss_before": rss_before, "peak_rss": peak_rss}
    every = [mine] * world
    if distributed:
        every = [None] * world
        dist.all_gather_object(every, mine)
    if rank == 0:
        timed = step_seconds[1:] if len(step_seconds) > 1 else step_seconds
        print(json.dumps({
            "system": "pytorch", "mode": args.mode, "world": world, "threads": torch.get_num_threads(),
            "torch_version": torch.__version__, "parameters": parameters, "batch": args.batch, "seq": args.seq,
            "tokens_per_second": world * args.batch * args.seq / statistics.median(timed),
            "step_seconds": step_seconds, "losses": losses,
            "rank_peak_rss_growth_bytes": [r["peak_rss"] - r["rss_before"] for r in every],
            "rank_peak_rss_bytes": [r["peak_rss"] for r in every],
            "rank_rss_before_bytes": [r["rss_before"] for r in every],
            "rank_import_rss_bytes": [r["rss_before"] - r["rss_start"] for r in every],
        }), flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
        # Leave without the interpreter's finalization: a gloo worker thread can still be releasing the
        # last collectives' work objects (the barrier's holds the all-gather's tensors, which point back
        # at Python objects) while Python shuts down; taking the GIL then ends that thread by forced
        # unwinding through C++ that may not unwind, and the process aborts after its output
        # ("terminate called without an active exception", SIGABRT; 3 of ~30 tiny runs of
        # --mode zero1 on torch 2.15; pytorch/pytorch#179291 describes the race). Everything is written.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
