#!/usr/bin/env python3
"""PyTorch reference for ferry's GPT-2: the model, its file formats and its training loop, written
from scratch so that ferry's numbers can be checked against an independent implementation.

As a library (imported by tests/parity/gpt2_parity_test.py and benchmarks/pytorch_train_step.py):
  - GPT2Config, GPT2: a float32 (or float64) GPT-2 whose parameters carry exactly the Hugging Face
    names and layouts (wte.weight [V,C], wpe.weight [maxT,C], h.{i}.attn.c_attn.weight [C,3C] as a
    Conv1D stored [in,out], ...). Pre-LayerNorm blocks (eps 1e-5), causal multi-head attention
    scaled by 1/sqrt(hs), GELU with the tanh approximation, logits tied to wte, loss = mean
    cross-entropy over all B*T positions, no dropout. init_parameters() draws every parameter,
    biases included, from a seeded torch.Generator so bias gradients are non-zero.
  - write_safetensors / read_safetensors (by hand: 8-byte little-endian header length, JSON header
    padded with spaces to a multiple of 8, raw little-endian row-major data; writes F32, reads
    F32/F16/BF16/F64 as float32),
    write_hf_config / read_hf_config (config.json), write_token_shard / read_token_shard (llm.c
    format: 256 int32 header [20240520, 1, n_tokens, 0...], then uint16 tokens).
  - micro_batch(): micro-batch k of a shard read sequentially is tokens [k*B*T, (k+1)*B*T + 1);
    inputs are its first B*T tokens as [B,T], targets the same window shifted by one.
  - loss_and_grads(): loss and every parameter's gradient on one micro-batch.
  - train_reference(): torch.optim.AdamW (weight decay only on tensors with dim >= 2), constant lr,
    optional clip_grad_norm_, step i on micro-batch i; returns each step's loss before its update.

As a command line tool (the same flags ferry's probe and `ferry train` take, so it can stand in for
either when debugging):
  gpt2_reference.py fixture --workdir DIR [--layers 2 --hidden 32 --heads 4 --vocab 96
                            --positions 16 --tokens 4096 --seed 1234]
      writes DIR/model.safetensors, DIR/config.json and DIR/train.bin.
  gpt2_reference.py grads --init-from MODEL.safetensors --data SHARD.bin --batch B --seq T
                          --out GRADS.safetensors [--dtype float32|float64]
      writes "loss" (1 element) and one gradient per parameter under the Hugging Face names.
  gpt2_reference.py train --init-from MODEL.safetensors --data SHARD.bin --batch B --seq T
                          --steps N --lr LR [--lr-schedule constant --warmup-steps 0
                          --weight-decay WD --betas B1,B2 --eps EPS --grad-clip MAX --shuffle false
                          --save-model PARAMS.safetensors] --summary SUMMARY.json
      writes {"steps": [{"step": i, "loss": ...}, ...], "final_loss": ...}; with --save-model also
      the parameters after the last step (F32, Hugging Face names, no prefix; a --dtype float64
      run is rounded to float32 on writing).
The model's config.json is read from the directory holding --init-from (Hugging Face convention).
"""
import argparse
import json
import math
import os
import struct
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LAYER_NORM_EPS = 1e-5
SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_HEADER_INTS = 256


# ----------------------------------------------------------------------------------------------
# Model


@dataclass
class GPT2Config:
    n_layer: int
    n_embd: int
    n_head: int
    n_positions: int
    vocab_size: int


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: a linear layer whose weight is stored [in, out]; y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(
            *x.shape[:-1], self.weight.shape[1])


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = Conv1D(config.n_embd, 3 * config.n_embd)
        self.c_proj = Conv1D(config.n_embd, config.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)  # each [B,T,C], in the order q, k, v
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))  # [B,NH,T,hs]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v  # [B,NH,T,hs]
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = Conv1D(config.n_embd, 4 * config.n_embd)
        self.c_proj = Conv1D(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        # F.gelu(approximate="tanh") is 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))).
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=LAYER_NORM_EPS)
        self.attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=LAYER_NORM_EPS)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2 whose state_dict() keys are the Hugging Face names without a prefix."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=LAYER_NORM_EPS)

    def forward(self, inputs, targets=None):
        """inputs, targets: int64 [B,T]. Returns (logits [B,T,V], mean loss or None)."""
        T = inputs.shape[1]
        if T > self.config.n_positions:
            raise ValueError(f"sequence length {T} exceeds n_positions {self.config.n_positions}")
        x = self.wte(inputs) + self.wpe(torch.arange(T, device=inputs.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output projection
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

    @torch.no_grad()
    def init_parameters(self, seed):
        """Weights and biases ~ N(0, 0.02); LayerNorm weights 1 + N(0, 0.1), LayerNorm biases
        N(0, 0.02). Drawn in named_parameters() order from one seeded generator."""
        generator = torch.Generator().manual_seed(seed)
        for name, param in self.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            is_layer_norm = ".ln_" in name or name.startswith("ln_")
            if is_layer_norm and name.endswith(".weight"):
                param.copy_(1.0 + 0.1 * noise)
            else:
                param.copy_(0.02 * noise)
        return self


def decay_mask(name, param):
    """True for the parameters AdamW decays: every tensor with dim >= 2 (wte, wpe, matrices)."""
    return param.dim() >= 2


def build_model(config, state=None, seed=None, dtype=torch.float32):
    """A GPT2 in `dtype`, loaded from `state` (name -> tensor, exact key set) or seeded init."""
    model = GPT2(config)
    if state is not None:
        model.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()}, strict=True)
    elif seed is not None:
        model.init_parameters(seed)
    return model.to(dtype)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------------------
# Files: safetensors, config.json, token shards

_DTYPE_FROM_SAFETENSORS = {"F32": np.float32, "F16": np.float16, "F64": np.float64,
                           "I64": np.int64, "I32": np.int32, "U16": np.uint16}


def write_safetensors(path, tensors):
    """tensors: dict name -> torch tensor or numpy array, written as F32 in sorted name order."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        value = tensors[name]
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().to(torch.float32).numpy()
        array = np.ascontiguousarray(np.asarray(value, dtype="<f4"))
        blob = array.tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """Returns dict name -> float32 numpy array (F16, BF16 and F64 are converted to float32;
    integer tensors keep their type). "__metadata__" is skipped."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (header_len,) = struct.unpack_from("<Q", raw, 0)
    if 8 + header_len > len(raw):
        raise ValueError(f"{path}: header length {header_len} runs past the end of the file")
    header = json.loads(raw[8:8 + header_len].decode("utf-8"))
    data = memoryview(raw)[8 + header_len:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name} has data_offsets {begin},{end} "
                             "outside the data")
        chunk = data[begin:end]
        dtype = entry["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif dtype in _DTYPE_FROM_SAFETENSORS:
            little_endian = np.dtype(_DTYPE_FROM_SAFETENSORS[dtype]).newbyteorder("<")
            array = np.frombuffer(chunk, dtype=little_endian)
            if array.dtype.kind == "f":
                array = array.astype(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        if array.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name} holds {array.size} elements, "
                             f"shape {list(shape)}")
        tensors[name] = array.reshape(shape).copy()
    return tensors


def write_hf_config(path, n_layer, n_embd, n_head, n_positions, vocab_size):
    config = {"model_type": "gpt2", "n_layer": n_layer, "n_embd": n_embd, "n_head": n_head,
              "n_positions": n_positions, "vocab_size": vocab_size, "n_ctx": n_positions}
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def read_hf_config(path):
    with open(path) as f:
        c = json.load(f)
    return GPT2Config(n_layer=c["n_layer"], n_embd=c["n_embd"], n_head=c["n_head"],
                      n_positions=c.get("n_positions", c.get("n_ctx")), vocab_size=c["vocab_size"])


def write_token_shard(path, tokens):
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 0xFFFF):
        raise ValueError("token ids must fit in uint16")
    header = np.zeros(SHARD_HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, tokens.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def read_token_shard(path):
    """Returns the shard's tokens as an int64 numpy array."""
    with open(path, "rb") as f:
        raw = f.read()
    header = np.frombuffer(raw[:SHARD_HEADER_INTS * 4], dtype="<i4")
    if header.size != SHARD_HEADER_INTS or header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        raise ValueError(f"{path}: not an llm.c token shard (magic {SHARD_MAGIC}, version 1)")
    n = int(header[2])
    tokens = np.frombuffer(raw[SHARD_HEADER_INTS * 4:], dtype="<u2")
    if tokens.size != n:
        raise ValueError(f"{path}: header says {n} tokens, file holds {tokens.size}")
    return tokens.astype(np.int64)


def micro_batch(tokens, k, B, T):
    """Micro-batch k of a shard read sequentially: (inputs, targets), int64 tensors [B,T]."""
    begin = k * B * T
    window = torch.as_tensor(np.asarray(tokens[begin:begin + B * T + 1]), dtype=torch.int64)
    if window.numel() != B * T + 1:
        raise ValueError(f"micro-batch {k} needs tokens [{begin}, {begin + B * T + 1}), "
                         f"the shard has {len(tokens)}")
    return window[:-1].view(B, T), window[1:].view(B, T)


# ----------------------------------------------------------------------------------------------
# Reference computations


def loss_and_grads(model, tokens, B, T, k=0):
    """Loss (python float) and dict name -> gradient tensor on micro-batch k."""
    model.zero_grad(set_to_none=True)
    inputs, targets = micro_batch(tokens, k, B, T)
    _, loss = model(inputs, targets)
    loss.backward()
    return loss.item(), {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def make_adamw(model, lr, betas, eps, weight_decay, **extra):
    decay = [p for n, p in model.named_parameters() if decay_mask(n, p)]
    no_decay = [p for n, p in model.named_parameters() if not decay_mask(n, p)]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **extra)


def train_reference(model, tokens, B, T, steps, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                    max_grad_norm=0.0):
    """AdamW at constant lr, step i on micro-batch i (no accumulation). Returns the loss of every
    step, computed before that step's update."""
    optimizer = make_adamw(model, lr, tuple(betas), eps, weight_decay)
    losses = []
    for step in range(steps):
        inputs, targets = micro_batch(tokens, step, B, T)
        _, loss = model(inputs, targets)
        loss.backward()
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


# ----------------------------------------------------------------------------------------------
# Command line


def make_fixture(workdir, config, n_tokens, seed):
    """Writes workdir/model.safetensors, config.json and train.bin; returns (model, tokens)."""
    os.makedirs(workdir, exist_ok=True)
    model = build_model(config, seed=seed)
    write_safetensors(os.path.join(workdir, "model.safetensors"), model.state_dict())
    write_hf_config(os.path.join(workdir, "config.json"), config.n_layer, config.n_embd,
                    config.n_head, config.n_positions, config.vocab_size)
    generator = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, config.vocab_size, (n_tokens,), generator=generator).numpy()
    write_token_shard(os.path.join(workdir, "train.bin"), tokens)
    return model, tokens


def load_model_files(init_from, dtype=torch.float32):
    model_dir = os.path.dirname(os.path.abspath(init_from))
    config = read_hf_config(os.path.join(model_dir, "config.json"))
    return build_model(config, state=read_safetensors(init_from), dtype=dtype)


def parse_bool(text):
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_betas(text):
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected B1,B2, got {text!r}")
    return float(parts[0]), float(parts[1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    fixture = sub.add_parser("fixture", help="write a random model, config.json and token shard")
    fixture.add_argument("--workdir", required=True)
    fixture.add_argument("--layers", type=int, default=2)
    fixture.add_argument("--hidden", type=int, default=32)
    fixture.add_argument("--heads", type=int, default=4)
    fixture.add_argument("--vocab", type=int, default=96)
    fixture.add_argument("--positions", type=int, default=16)
    fixture.add_argument("--tokens", type=int, default=4096)
    fixture.add_argument("--seed", type=int, default=1234)

    for name in ("grads", "train"):
        p = sub.add_parser(name, help="loss and gradients on micro-batch 0" if name == "grads"
                           else "AdamW training, losses to a summary JSON")
        p.add_argument("--init-from", required=True)
        p.add_argument("--data", required=True)
        p.add_argument("--batch", type=int, required=True)
        p.add_argument("--seq", type=int, required=True)
        p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
        if name == "grads":
            p.add_argument("--out", required=True)
        else:
            p.add_argument("--steps", type=int, required=True)
            p.add_argument("--lr", type=float, required=True)
            p.add_argument("--lr-schedule", choices=("constant",), default="constant")
            p.add_argument("--warmup-steps", type=int, choices=(0,), default=0)
            p.add_argument("--weight-decay", type=float, default=0.1)
            p.add_argument("--betas", type=parse_betas, default=(0.9, 0.95))
            p.add_argument("--eps", type=float, default=1e-8)
            p.add_argument("--grad-clip", type=float, default=1.0)
            p.add_argument("--shuffle", type=parse_bool, default=False)
            p.add_argument("--summary", required=True)
            p.add_argument("--save-model", metavar="PATH",
                           help="also write the parameters after the last step (F32 safetensors)")

    args = parser.parse_args(argv)
    if args.command == "fixture":
        config = GPT2Config(args.layers, args.hidden, args.heads, args.positions, args.vocab)
        make_fixture(args.workdir, config, args.tokens, args.seed)
        return 0

    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    model = load_model_files(args.init_from, dtype)
    tokens = read_token_shard(args.data)
    if args.command == "grads":
        loss, grads = loss_and_grads(model, tokens, args.batch, args.seq)
        write_safetensors(args.out, {"loss": torch.tensor([loss]), **grads})
        return 0

    if args.shuffle:
        parser.error("only --shuffle false is supported (micro-batch i is read sequentially)")
    losses = train_reference(model, tokens, args.batch, args.seq, args.steps, args.lr, args.betas,
                             args.eps, args.weight_decay, args.grad_clip)
    summary = {"steps": [{"step": i, "loss": loss} for i, loss in enumerate(losses)],
               "final_loss": losses[-1] if losses else None}
    with open(args.summary, "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    if args.save_model:
        write_safetensors(args.save_model, model.state_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main())
