"""One run's numbers for the sweep table, computed from its per-step datasets (not from the `summary.*`
attributes, which a killed run never wrote), over the measured steps: steps >= warmup_steps that were not
skipped, as `hzpbench run`'s summary counts them (docs/run.md). Percentiles interpolate linearly between
order statistics, as the harness's do.

Spreads are p5 and p95 over the measured steps. Per-rank series ([step, rank]) are first reduced per step
(mean over ranks; max for peak memory), then over steps.
"""
from __future__ import annotations

import math

import numpy as np

from .results_file import Run

# Per-step series whose median, p5 and p95 the table shows, by column stem.
STEP_METRICS = {
    "step_time_s": "steps/step_time_s",
    "tokens_per_s": "steps/tokens_per_s",
    "mfu": "steps/mfu",
    "exposed_comm_frac": "steps/exposed_comm_frac",
}


def status_text(run: Run) -> str:
    if run.killed:
        return "killed"      # or still being written: collect cannot see jobs (slurm/sweep status can)
    if run.status == "running":
        return "running"
    return run.status


def measured_mask(run: Run) -> np.ndarray:
    n = run.completed_steps
    warmup = int(run.attrs.get("warmup_steps", run.config.get("harness.warmup_steps", 0)))
    mask = np.arange(n) >= warmup
    skipped = run.series.get("steps/skipped")
    if skipped is not None:
        mask &= skipped[:n] != 1
    return mask


def _pct(v: np.ndarray, q: float) -> float:
    v = v[np.isfinite(v)]
    return float(np.percentile(v, q)) if v.size else math.nan


def _per_step(run: Run, name: str, reduce=np.mean) -> np.ndarray | None:
    """The series as float64 per step; a [step, rank] one reduced over ranks. Fill values (a row whose
    extent reached the disk before its values: -1 for int64, NaN for float64) become NaN and make the
    step's value NaN, which the percentiles then leave out."""
    raw = run.series.get(name)
    if raw is None:
        return None
    a = raw.astype(np.float64)
    if np.issubdtype(raw.dtype, np.integer):
        a[raw == -1] = math.nan
    if a.ndim == 2:
        return reduce(a, axis=1) if a.shape[1] else np.full(a.shape[0], math.nan)
    return a


def comm_levels(run: Run) -> set[str]:
    return {k.split("/")[2] for k in run.series if k.startswith("comm/") and k.endswith("/bytes")}


def summarise(run: Run, levels: list[str]) -> dict:
    """Column -> value (floats may be NaN: no measured step, or the file lacks the dataset)."""
    mask = measured_mask(run)
    row: dict = {"completed_steps": run.completed_steps, "measured_steps": int(mask.sum())}
    for stem, ds in STEP_METRICS.items():
        v = _per_step(run, ds)
        if v is None:
            run.missing.append(ds)
            v = np.full(run.completed_steps, math.nan)
        v = v[mask]
        row[f"{stem}_median"] = _pct(v, 50)
        row[f"{stem}_p5"] = _pct(v, 5)
        row[f"{stem}_p95"] = _pct(v, 95)

    exposed = _per_step(run, "ranks/exposed_comm_s")
    if exposed is None:
        run.missing.append("ranks/exposed_comm_s")
    row["exposed_comm_s_median"] = _pct(exposed[mask], 50) if exposed is not None else math.nan

    # Bytes per step and link level: summed over collective ops, mean over ranks (what one rank moves).
    for level in levels:
        total = np.zeros(run.completed_steps)
        for k in run.series:
            parts = k.split("/")
            if len(parts) == 4 and parts[0] == "comm" and parts[2] == level and parts[3] == "bytes":
                total = total + _per_step(run, k)
        row[f"bytes_{level}_per_rank_step_median"] = _pct(total[mask], 50)

    peak = _per_step(run, "ranks/mem_peak_bytes", reduce=np.max)
    if peak is None:
        run.missing.append("ranks/mem_peak_bytes")
    row["mem_peak_bytes_max"] = float(np.nanmax(peak)) if peak is not None and np.isfinite(peak).any() else math.nan
    slack = _per_step(run, "ranks/slack")
    if slack is None:
        run.missing.append("ranks/slack")
    row["slack_median"] = _pct(slack[mask], 50) if slack is not None else math.nan

    loss = run.series.get("steps/loss")
    if loss is None:
        run.missing.append("steps/loss")
    row["final_loss"] = float(loss[-1]) if loss is not None and len(loss) else math.nan
    return row
