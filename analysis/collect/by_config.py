"""The per-run table folded over repeats: one row per configuration (the axes' values), with how many runs
it had and how they ended, the median over its ok runs of each run's number, and for the step metrics
their spread across repeats, (max - min) / median. Runs that are not ok are counted in `statuses`, never
silently left out; their numbers do not enter the medians (a killed run's steps are a partial sample).
"""
from __future__ import annotations

import collections
import math

import numpy as np
import pandas as pd

from ..load.labels import plain
from . import run_summary

REPEAT_SPREAD = [f"{stem}_median" for stem in run_summary.STEP_METRICS]


def _state(status) -> str:
    s = str(status)
    return s.split(":")[0] if s.startswith(("failed", "unreadable")) else s.split(" (")[0]


def _median(v: pd.Series) -> float:
    a = pd.to_numeric(v, errors="coerce").to_numpy(dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(np.median(a)) if a.size else math.nan


def _spread(v: pd.Series) -> float:
    a = pd.to_numeric(v, errors="coerce").to_numpy(dtype=np.float64)
    a = a[np.isfinite(a)]
    m = float(np.median(a)) if a.size else math.nan
    return float((a.max() - a.min()) / m) if a.size > 1 and m else math.nan


def fold(table: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """table: collect's per-run table (columns task, status, axes..., world_size, ..., measured_steps, metrics,
    file). Returns one row per distinct tuple of axis values, in order of first appearance."""
    # A simulated run (hzpbench simulate) never folds into the measured runs of its configuration.
    if "simulated" in table and "simulated" not in axes and table["simulated"].nunique(dropna=True) > 1:
        axes = [*axes, "simulated"]
    first_metric = list(table.columns).index("measured_steps") + 1
    metrics = [c for c in table.columns[first_metric:] if c != "file" and not c.endswith(("_p5", "_p95"))]
    # repr() keys: axis values may be None, floats or strings, and a missing value must not merge with NaN.
    key = table[axes].apply(lambda r: tuple(repr(plain(v)) for v in r), axis=1) if axes else pd.Series(
        [()] * len(table), index=table.index)
    out = []
    for _, members in table.groupby(key, sort=False):
        ok = members[members["status"] == "ok"]
        states = collections.Counter(_state(s) for s in members["status"])
        row = {a: members[a].iloc[0] for a in axes}
        row["runs"] = len(members)
        row["statuses"] = ", ".join(f"{n} {s}" for s, n in states.most_common())
        row["world_size"] = members["world_size"].iloc[0]
        for c in metrics:
            row[c] = _median(ok[c])
            if c in REPEAT_SPREAD:
                row[f"{c}_repeat_spread"] = _spread(ok[c])
        out.append(row)
    cols = [*axes, "runs", "statuses", "world_size"]
    for c in metrics:
        cols.append(c)
        if c in REPEAT_SPREAD:
            cols.append(f"{c}_repeat_spread")
    return pd.DataFrame(out, columns=cols)
