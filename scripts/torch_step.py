#!/usr/bin/env python3
"""PyTorch reference step for hzpbench's Llama presets: trains the same decoder (same shapes, same FLOP
convention) with AdamW and gradient accumulation, eager or torch.compile'd, and prints its throughput and
MFU. Run it next to hzpbench on the same machine (an H100 in bf16-mixed, or the CPU in fp32 with
--threads 2) to see how hzpbench's hand-written step compares with what stock PyTorch reaches on that shape.

  scripts/torch_step.py --preset 1b --compile --json torch_1b.json
  scripts/torch_step.py --preset small --device cpu --threads 2 --steps 2 --warmup 1 --micro-batches 1

Exit status: 0, 2 for a bad argument, 3 when the final loss is not finite.
"""
import argparse
import contextlib
import json
import math
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The shapes of workloads/llama/presets.cpp (the paper-scale 9b and seed-oss-36b do not fit one GPU).
PRESETS = {
    "tiny": dict(layers=4, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=192, vocab=64, seq_len=64,
                 rope_base=1e4, norm_eps=1e-5, tied=True),
    "small": dict(layers=8, hidden=512, heads=8, kv_heads=4, head_dim=64, ffn=1408, vocab=8192, seq_len=256,
                  rope_base=1e4, norm_eps=1e-5, tied=True),
    "1b": dict(layers=16, hidden=2048, heads=32, kv_heads=8, head_dim=64, ffn=8192, vocab=128256, seq_len=4096,
               rope_base=5e5, norm_eps=1e-5, tied=True),
}

# enable_gqa arrived in scaled_dot_product_attention with PyTorch 2.5; before it, k and v are repeated.
_GQA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def flops_per_token(c: dict) -> tuple[float, float]:
    """hzpbench's LlamaConfig::flops_per_token: 6 per matmul weight (the LM head counted even when tied)
    plus 12·L·H·hd·T for QK^T and PV (forward and backward); causal counts half the attention."""
    d, hd = c["hidden"], c["head_dim"]
    block = d * c["heads"] * hd * 2 + d * c["kv_heads"] * hd * 2 + 3 * d * c["ffn"]  # wq, wo; wk, wv; mlp
    dense = 6.0 * (c["layers"] * block + c["vocab"] * d)
    attn = 12.0 * c["layers"] * c["heads"] * hd * c["seq_len"]
    return dense + attn, dense + 0.5 * attn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    # RoPE in the rotate-half convention (Hugging Face Llama): element i pairs with i + head_dim/2.
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d, hd = c["hidden"], c["head_dim"]
        self.heads, self.kv_heads, self.head_dim = c["heads"], c["kv_heads"], hd
        self.attn_norm = RMSNorm(d, c["norm_eps"])
        self.wq = nn.Linear(d, c["heads"] * hd, bias=False)
        self.wk = nn.Linear(d, c["kv_heads"] * hd, bias=False)
        self.wv = nn.Linear(d, c["kv_heads"] * hd, bias=False)
        self.wo = nn.Linear(c["heads"] * hd, d, bias=False)
        self.mlp_norm = RMSNorm(d, c["norm_eps"])
        self.w_gate = nn.Linear(d, c["ffn"], bias=False)
        self.w_up = nn.Linear(d, c["ffn"], bias=False)
        self.w_down = nn.Linear(c["ffn"], d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.wk(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if _GQA:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            rep = self.heads // self.kv_heads
            a = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1),
                                               is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))
        h = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.tok_embeddings = nn.Embedding(c["vocab"], c["hidden"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"], c["norm_eps"])
        self.lm_head = None if c["tied"] else nn.Linear(c["hidden"], c["vocab"], bias=False)
        hd = c["head_dim"]
        inv_freq = c["rope_base"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        angles = torch.outer(torch.arange(c["seq_len"], dtype=torch.float64), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        # hzpbench's initialisation: N(0, 0.02), the two residual-writing projections scaled by 1/sqrt(2L).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c["layers"]) if name.endswith(("wo.weight", "w_down.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens, targets):
        x = self.tok_embeddings(tokens)
        t = tokens.shape[1]
        for blk in self.blocks:
            x = blk(x, self.cos[:t], self.sin[:t])
        x = self.norm(x)
        logits = F.linear(x, self.tok_embeddings.weight) if self.lm_head is None else self.lm_head(x)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", choices=["bf16-mixed", "fp32"], help="default: bf16-mixed on cuda, fp32 on cpu")
    ap.add_argument("--micro-batches", type=int, default=8, help="forward+backward passes per optimizer step")
    ap.add_argument("--micro-batch-size", type=int, default=1, help="sequences per micro-batch")
    ap.add_argument("--seq-len", type=int, help="override the preset's sequence length")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (compiled during warmup)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads on the CPU")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--peak-tflops", type=float, help="for MFU; default 989 (H100 SXM dense bf16) on cuda, none on cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the results as one JSON object here")
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device is visible to PyTorch")
    for k in ("micro_batches", "micro_batch_size", "steps"):
        if getattr(a, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1")
    if a.warmup < 0 or (a.seq_len is not None and a.seq_len < 1):
        ap.error("--warmup must be >= 0 and --seq-len >= 1")
    a.precision = a.precision or ("bf16-mixed" if a.device == "cuda" else "fp32")
    if a.peak_tflops is None and a.device == "cuda":
        a.peak_tflops = 989.0
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    cfg = dict(PRESETS[a.preset])
    if a.seq_len:
        cfg["seq_len"] = a.seq_len
    if a.threads and a.device == "cpu":
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)

    model = Llama(cfg).to(dev)  # fp32 parameters in both precisions
    params = sum(p.numel() for p in model.parameters())  # the tied table once
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8,
                            **({"fused": True} if a.device == "cuda" else {"foreach": True}))
    step_model = torch.compile(model) if a.compile else model
    autocast = (lambda: torch.autocast(a.device, dtype=torch.bfloat16)) if a.precision == "bf16-mixed" \
        else contextlib.nullcontext

    # Random tokens, generated once: micro-batch m reads data[m]; targets are the next tokens.
    g = torch.Generator().manual_seed(a.seed)
    data = torch.randint(0, cfg["vocab"], (a.micro_batches, a.micro_batch_size, cfg["seq_len"] + 1), generator=g)
    data = data.to(dev)
    inputs, targets = data[:, :, :-1], data[:, :, 1:]

    def step():
        total = torch.zeros((), device=dev)
        for m in range(a.micro_batches):
            with autocast():
                loss = step_model(inputs[m], targets[m]) / a.micro_batches
            loss.backward()
            total += loss.detach().float()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total

    for _ in range(a.warmup):
        step()
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()  # the steady-state peak (optimizer state exists after warmup)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.steps)]
    times = []
    for i in range(a.steps):
        if cuda:
            events[i][0].record()
            loss = step()
            events[i][1].record()
        else:
            t0 = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) / 1e3 for s, e in events]
    final_loss = float(loss.item())

    step_s = statistics.median(times)
    tokens_per_s = a.micro_batches * a.micro_batch_size * cfg["seq_len"] / step_s
    fpt_full, fpt_causal = flops_per_token(cfg)
    peak = a.peak_tflops * 1e12 if a.peak_tflops else None
    r = {
        "preset": a.preset, "device": a.device, "precision": a.precision, "compile": a.compile,
        "seq_len": cfg["seq_len"], "micro_batches": a.micro_batches, "micro_batch_size": a.micro_batch_size,
        "step_s_median": step_s, "step_s_all": times, "tokens_per_s": tokens_per_s,
        "flops_per_token_full": fpt_full, "flops_per_token_causal": fpt_causal,
        "mfu_full": tokens_per_s * fpt_full / peak if peak else None,
        "mfu_causal": tokens_per_s * fpt_causal / peak if peak else None,
        "peak_tflops": a.peak_tflops,
        "peak_mem_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "loss": final_loss, "torch_version": torch.__version__,
        "device_name": torch.cuda.get_device_name() if cuda else (platform.processor() or platform.machine()),
        "threads": torch.get_num_threads() if not cuda else None, "params": params,
    }

    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
    rows = [
        ("preset", f"{a.preset} ({params / 1e6:.2f}M parameters, T={cfg['seq_len']}, "
                   f"{a.micro_batches}x{a.micro_batch_size} sequences per step)"),
        ("device", f"{a.device}: {r['device_name']}" + (f", {r['threads']} threads" if not cuda else "")),
        ("precision", a.precision), ("compile", "torch.compile" if a.compile else "eager"),
        ("step time (median)", f"{step_s * 1e3:.2f} ms over {a.steps} steps (after {a.warmup} warmup)"),
        ("tokens/s", f"{tokens_per_s:,.0f}"),
        ("MFU full / causal", f"{pct(r['mfu_full'])} / {pct(r['mfu_causal'])}"
                              + (f" of {a.peak_tflops:g} TFLOP/s" if peak else " (no --peak-tflops)")),
        ("peak memory", f"{r['peak_mem_bytes'] / 2**30:.2f} GiB" if cuda else "-"),
        ("final loss", f"{final_loss:.4f}"), ("torch", torch.__version__),
    ]
    w = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{w}}  {v}" for k, v in rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
            f.write("\n")
    if not math.isfinite(final_loss):
        print(f"torch_step: the final loss is {final_loss}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
