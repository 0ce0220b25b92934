"""One opened results file as pandas rows: its per-step-and-rank series (long format: one row per step ×
rank, `steps/*` repeated on every rank's row) and its model-state bytes per rank and component.

Series keep their dataset paths as column names (`steps/loss`, `ranks/compute_s`,
`comm/all_gather/intra/bytes`), so a column says where its numbers come from (docs/results-schema.md).
Every series becomes float64: integer fill values (-1, a row whose extent reached the disk before its
values) become NaN, as float fill values already are, so a half-written step never reads as a plausible 0.
Byte counts stay exact (below 2^53).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .results_file import Run


def as_float(raw: np.ndarray) -> np.ndarray:
    a = raw.astype(np.float64)
    if np.issubdtype(raw.dtype, np.integer):
        a[raw == -1] = math.nan
    return a


def warmup_steps(run: Run) -> int:
    return int(run.attrs.get("warmup_steps", run.config.get("harness.warmup_steps", 0)))


def long_rows(run: Run, world: int) -> pd.DataFrame:
    """Rows step × rank (step-major) with every series; `measured` = the step counts in summaries (step >=
    warmup_steps and not skipped, as `hzpbench run`'s summary)."""
    n = run.completed_steps
    # A resumed run's rows start at its first_step (schema version 2; 0 otherwise). Its warm-up counts from
    # there, as the run's own summary counts it.
    first = int(run.attrs.get("first_step", 0))
    cols: dict[str, np.ndarray] = {
        "step": np.repeat(first + np.arange(n), world),
        "rank": np.tile(np.arange(world), n),
    }
    for name, raw in sorted(run.series.items()):
        a = as_float(raw)
        if a.ndim == 1:
            cols[name] = np.repeat(a, world)
        elif a.ndim == 2 and a.shape[1] == world:
            cols[name] = a.reshape(-1)
    measured = np.arange(n) >= warmup_steps(run)
    skipped = run.series.get("steps/skipped")
    if skipped is not None:
        measured &= skipped[:n] != 1
    cols["measured"] = np.repeat(measured, world)
    return pd.DataFrame(cols)


def memory_rows(run: Run) -> pd.DataFrame:
    """memory/model_state_bytes as rows rank × component (empty when the run wrote none: it ended before
    step 0 finished)."""
    if run.model_state is None or run.model_state.ndim != 2:
        return pd.DataFrame(columns=["rank", "component", "bytes"])
    ranks, comps = run.model_state.shape
    names = run.components if len(run.components) == comps else [f"c{i}" for i in range(comps)]
    return pd.DataFrame({
        "rank": np.repeat(np.arange(ranks), comps),
        "component": np.tile(np.array(names, dtype=object), ranks),
        "bytes": as_float(run.model_state).reshape(-1),
    })
