"""scripts/torch_step.py (the PyTorch reference step): a short CPU run of tiny writes finite, positive
results, and its FLOP and parameter counts are hzpbench's (LlamaConfig::flops_per_token, ::num_params),
recomputed here by hand. Skipped where torch is not installed (CTest checks first and reports a skip)."""
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "torch_step.py"


def hzp_num_params(L, d, H, KV, hd, ffn, V, tied):
    block = 2 * d + d * H * hd * 2 + d * KV * hd * 2 + 3 * d * ffn  # two norms, wq+wo, wk+wv, mlp
    return V * d + L * block + d + (0 if tied else V * d)


def test_tiny_cpu_run(tmp_path):
    out = tmp_path / "tiny.json"
    cmd = [sys.executable, str(SCRIPT), "--preset", "tiny", "--device", "cpu", "--threads", "1", "--steps", "2",
           "--warmup", "1", "--micro-batches", "2", "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    r = json.loads(out.read_text())
    assert r["tokens_per_s"] > 0 and len(r["step_s_all"]) == 2
    assert math.isfinite(r["loss"]) and r["loss"] > 0
    assert (r["preset"], r["device"], r["precision"], r["seq_len"]) == ("tiny", "cpu", "fp32", 64)
    assert r["mfu_full"] is None  # no peak on the CPU unless --peak-tflops

    # 6 per matmul weight: per block wq 64·64, wk and wv 64·32 each, wo 64·64, gate/up/down 64·192 each,
    # times 4 blocks, plus the (tied) LM head 64·64; attention 12·L·H·hd·T, half of it when causal.
    dense = 6 * (4 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 192) + 64 * 64)
    attn = 12 * 4 * 4 * 16 * 64
    assert (dense, attn) == (1_204_224, 196_608)
    assert r["flops_per_token_full"] == dense + attn == 1_400_832
    assert r["flops_per_token_causal"] == dense + attn // 2

    # sum(p.numel()) of the model (the tied table once) = hzpbench's num_params = 201,280 (≈ 0.20M).
    assert r["params"] == hzp_num_params(4, 64, 4, 2, 16, 192, 64, True) == 201_280


def test_preset_shapes_match_hzpbench():
    """Every preset's module, built on the meta device (no memory), has hzpbench's parameter count."""
    spec = importlib.util.spec_from_file_location("torch_step", SCRIPT)
    ts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ts)
    expected = {"tiny": 201_280, "small": 27_795_968, "1b": 1_235_814_400}  # presets.cpp: 0.20M, 27.8M, 1.236B
    for name, c in ts.PRESETS.items():
        assert hzp_num_params(c["layers"], c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["ffn"],
                              c["vocab"], c["tied"]) == expected[name]
        with torch.device("meta"):
            model = ts.Llama(c)
        assert sum(p.numel() for p in model.parameters()) == expected[name], name
