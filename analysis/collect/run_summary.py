"""One run's numbers for the sweep table, computed from its per-step datasets in the loader's long frame (not
from the `summary.*` attributes, which a killed run never wrote), over the measured steps: steps >=
warmup_steps that were not skipped, as `hzpbench run`'s summary counts them (docs/run.md). Percentiles
interpolate linearly between order statistics, as the harness's do.

Spreads are p5 and p95 over the measured steps. Per-rank series ([step, rank]) are first reduced per step
(mean over ranks; max for peak memory), then over steps. A step with a fill value (NaN) on any rank is NaN
and stays out of the percentiles (analysis/stats.py).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..load import Results
from ..stats import by_run, level_bytes, pct, per_step

# Per-step series whose median, p5 and p95 the table shows, by column stem.
STEP_METRICS = {
    "step_time_s": "steps/step_time_s",
    "tokens_per_s": "steps/tokens_per_s",
    "mfu": "steps/mfu",
    "exposed_comm_frac": "steps/exposed_comm_frac",
}
# Datasets a complete run has and the table reads; an ok run lacking one is said so.
WANTED = [*STEP_METRICS.values(), "ranks/exposed_comm_s", "ranks/mem_peak_bytes", "ranks/slack", "steps/loss"]


def _one(frame: pd.DataFrame, has: set[str], levels: list[str], missing: list[str]) -> dict:
    missing += [d for d in WANTED if d not in has]
    if frame.empty:           # opened, but not one completed step: nothing to take a median of
        row = {"measured_steps": 0}
        for stem in STEP_METRICS:
            row.update({f"{stem}_median": math.nan, f"{stem}_p5": math.nan, f"{stem}_p95": math.nan})
        row["exposed_comm_s_median"] = math.nan
        row.update({f"bytes_{lv}_per_rank_step_median": math.nan for lv in levels})
        row.update(mem_peak_bytes_max=math.nan, slack_median=math.nan, final_loss=math.nan)
        return row
    measured = frame.groupby("step", sort=True)["measured"].first()
    row: dict = {"measured_steps": int(measured.sum())}
    rank0 = frame[frame["rank"] == 0].set_index("step").sort_index()
    for stem, ds in STEP_METRICS.items():
        v = rank0[ds][measured] if ds in has else np.array([])
        row[f"{stem}_median"] = pct(v, 50)
        row[f"{stem}_p5"] = pct(v, 5)
        row[f"{stem}_p95"] = pct(v, 95)
    if "ranks/exposed_comm_s" in has:
        row["exposed_comm_s_median"] = pct(per_step(frame, "ranks/exposed_comm_s")[measured], 50)
    else:
        row["exposed_comm_s_median"] = math.nan
    for level in levels:
        row[f"bytes_{level}_per_rank_step_median"] = pct(level_bytes(frame, has, level)[measured], 50)
    if "ranks/mem_peak_bytes" in has:
        peak = per_step(frame, "ranks/mem_peak_bytes", "max")
        row["mem_peak_bytes_max"] = float(peak.max()) if peak.notna().any() else math.nan
    else:
        row["mem_peak_bytes_max"] = math.nan
    if "ranks/slack" in has:
        row["slack_median"] = pct(per_step(frame, "ranks/slack")[measured], 50)
    else:
        row["slack_median"] = math.nan
    if "steps/loss" in has and len(rank0):
        row["final_loss"] = float(rank0["steps/loss"].iloc[-1])
    else:
        row["final_loss"] = math.nan
    return row


def summarise(res: Results) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """One row per opened run (index: run) and, per run, the wanted datasets it lacks."""
    rows, missing = {}, {}
    frames = by_run(res.long)
    for run, has in res.datasets.items():
        frame = frames.get(run, pd.DataFrame())
        miss: list[str] = []
        rows[run] = _one(frame, has, res.levels, miss)
        missing[run] = miss
    return pd.DataFrame.from_dict(rows, orient="index"), missing
