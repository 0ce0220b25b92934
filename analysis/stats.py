"""Per-run reductions of the loader's long frame, shared by the tables and figures: a [step, rank] series
reduced over ranks per step (mean, or max for peaks), then over a run's measured steps (median and
percentiles, linear interpolation as the harness's summary uses). A step with a fill value (NaN) on any rank
is NaN and stays out of the percentiles."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd


def pct(v, q: float) -> float:
    a = np.asarray(v, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(np.percentile(a, q)) if a.size else math.nan


def per_step(frame: pd.DataFrame, column: str, how: str = "mean") -> pd.Series:
    """One run's [step, rank] series reduced over ranks per step (index: step). NaN on any rank -> NaN."""
    g = frame.groupby("step", sort=True)[column]
    out = g.max() if how == "max" else g.sum() if how == "sum" else g.mean()
    return out.where(g.count() == g.size())


def measured(frame: pd.DataFrame) -> pd.Series:
    """Per step (index: step) whether it counts in summaries."""
    return frame.groupby("step", sort=True)["measured"].first().astype(bool)


def measured_median(frame: pd.DataFrame, column: str, how: str = "mean") -> float:
    """Median over the measured steps of the series reduced over ranks; NaN when the run lacks it."""
    if column not in frame or frame.empty:
        return math.nan
    return pct(per_step(frame, column, how)[measured(frame)], 50)


def level_bytes(frame: pd.DataFrame, has: set[str], level: str) -> pd.Series:
    """Bytes one rank moves per step on a link level: comm/<op>/<level>/bytes summed over ops, mean over
    ranks; 0 for a run with no such series (no communicator), not a missing value."""
    cols = sorted(c for c in has if c.startswith("comm/") and c.endswith(f"/{level}/bytes") and c.count("/") == 3)
    if not cols:
        return pd.Series(0.0, index=pd.Index(sorted(frame["step"].unique()), name="step"))
    total = frame[cols].sum(axis=1, min_count=len(cols))
    return per_step(frame.assign(_bytes=total), "_bytes")


def by_run(long: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return dict(tuple(long.groupby("run", sort=False, observed=True))) if not long.empty else {}
