"""The per-run table folded over repeats: one row per configuration (the axes' values), with how many runs
it had and how they ended, the median over its ok runs of each run's number, and for the step metrics
their spread across repeats, (max - min) / median. Runs that are not ok are counted in `statuses`, never
silently left out; their numbers do not enter the medians (a killed run's steps are a partial sample).
"""
from __future__ import annotations

import collections
import math

import numpy as np

from . import run_summary

REPEAT_SPREAD = [f"{stem}_median" for stem in run_summary.STEP_METRICS]


def fold(columns: list[str], rows: list[dict], axes: list[str]) -> tuple[list[str], list[dict]]:
    first_metric = columns.index("measured_steps") + 1
    metrics = [c for c in columns[first_metric:] if c != "file" and not c.endswith("_p5") and not c.endswith("_p95")]
    groups: dict[tuple, list[dict]] = collections.OrderedDict()
    for r in rows:
        groups.setdefault(tuple(repr(r.get(a)) for a in axes), []).append(r)
    out = []
    for members in groups.values():
        ok = [r for r in members if r.get("status") == "ok"]
        states = collections.Counter(_state(r) for r in members)
        row = {a: members[0].get(a) for a in axes}
        row["runs"] = len(members)
        row["statuses"] = ", ".join(f"{n} {s}" for s, n in states.most_common())
        row["world_size"] = members[0].get("world_size")
        for c in metrics:
            vals = np.array([r[c] for r in ok if isinstance(r.get(c), (int, float)) and math.isfinite(r[c])], float)
            row[c] = float(np.median(vals)) if vals.size else math.nan
            if c in REPEAT_SPREAD:
                row[f"{c}_repeat_spread"] = (float((vals.max() - vals.min()) / row[c])
                                             if vals.size > 1 and row[c] else math.nan)
        out.append(row)
    cols = [*axes, "runs", "statuses", "world_size"]
    for c in metrics:
        cols.append(c)
        if c in REPEAT_SPREAD:
            cols.append(f"{c}_repeat_spread")
    return cols, out


def _state(r: dict) -> str:
    s = str(r.get("status", "?"))
    return s.split(":")[0] if s.startswith(("failed", "unreadable")) else s.split(" (")[0]
