"""Step-time closure: where a step's time goes, per configuration (scheduler, layout and the other swept
values): compute, exposed communication split into waiting for the last peer to join and waiting for the
transfer, pipeline wait, optimizer, other (docs/run.md "Metrics"; the parts add up to the step time).

Each part is, per run, the median over its measured steps of the mean over ranks; per configuration the
median over its ok runs, with the spread of the runs' summed step time across repeats (min to max) as an
error bar. A run that is not ok gets a bar of its own, hatched and named by its state, from the steps it
completed (a killed run's steps are a partial sample, so they never enter a configuration's median).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..load import Results
from ..stats import by_run, measured_median
from .common import NOT_OK_HATCH, Figure, plt, save, skip, state_note

PARTS = [
    ("compute", "ranks/compute_s", "#4c9a2a"),
    ("exposed comm: join", "ranks/join_wait_s", "#f4a582"),
    ("exposed comm: transfer", "ranks/transfer_wait_s", "#b2182b"),
    ("pipeline wait", "ranks/pipeline_wait_s", "#762a83"),
    ("optimizer", "ranks/optimizer_s", "#2166ac"),
    ("other", "ranks/other_s", "#999999"),
]


def run_parts(res: Results) -> pd.DataFrame:
    """One row per opened run: each part's median over measured steps (s), and their sum."""
    frames = by_run(res.long)
    rows = []
    for _, r in res.runs.iterrows():
        f = frames.get(r["run"])
        if f is None:
            continue
        row = {"run": r["run"], "config": r["config"], "state": r["state"],
               "completed_steps": r["completed_steps"], "planned_steps": r["planned_steps"],
               "measured_steps": int(f.groupby("step")["measured"].first().sum())}
        for name, col, _ in PARTS:
            row[name] = measured_median(f, col)
        row["step_time_s"] = measured_median(f, "ranks/step_time_s")
        rows.append(row)
    return pd.DataFrame(rows)


def bars(per_run: pd.DataFrame) -> pd.DataFrame:
    """One bar per configuration (its ok runs) and one per run that is not ok."""
    names = [p[0] for p in PARTS]
    out = []
    for config, g in per_run.groupby("config", sort=False):
        ok = g[g["state"] == "ok"]
        if len(ok):
            totals = ok[names].sum(axis=1, min_count=1)
            row = {"bar": config, "config": config, "state": "ok", "runs": " ".join(ok["run"]), "n_runs": len(ok)}
            row.update({n: float(np.nanmedian(ok[n])) if ok[n].notna().any() else math.nan for n in names})
            row["total_s"] = sum(row[n] for n in names if math.isfinite(row[n]))
            row["total_min_s"], row["total_max_s"] = float(totals.min()), float(totals.max())
            out.append(row)
        for _, r in g[g["state"] != "ok"].iterrows():
            note = state_note(r["state"], int(r["completed_steps"]), r["planned_steps"])
            row = {"bar": f"{config} [{r['run']}: {note}]", "config": config, "state": r["state"], "runs": r["run"],
                   "n_runs": 1}
            row.update({n: r[n] for n in names})
            vals = [row[n] for n in names if math.isfinite(row[n])]
            row["total_s"] = sum(vals) if vals else math.nan
            row["total_min_s"] = row["total_max_s"] = row["total_s"]
            out.append(row)
    return pd.DataFrame(out)


def make(res: Results, out) -> Figure:
    fig_info = Figure("closure", "Step-time closure",
                      "Where a step's time goes, per configuration: median over measured steps of each part "
                      "(mean over ranks), median over the configuration's ok runs; n = ok runs, error bar = "
                      "min..max of the runs' step time across repeats. Right: the same as shares of the step. "
                      "Hatched bars are single runs that did not finish ok, from the steps they completed.")
    per_run = run_parts(res)
    if per_run.empty:
        return skip(fig_info, "no run completed a step")
    b = bars(per_run)
    names = [p[0] for p in PARTS]
    present = [p for p in PARTS if b[p[0]].notna().any() and (b[p[0]].fillna(0) > 0).any()]
    n = len(b)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 1.2 + 0.42 * n), sharey=True,
                                  gridspec_kw={"width_ratios": [3, 2]})
    y = np.arange(n)[::-1]
    left = np.zeros(n)
    left_share = np.zeros(n)
    total = b["total_s"].to_numpy(dtype=float)
    for name, _, colour in present:
        v = b[name].fillna(0).to_numpy(dtype=float)
        hatch = [NOT_OK_HATCH if s != "ok" else None for s in b["state"]]
        for i in range(n):
            ax.barh(y[i], v[i], left=left[i], color=colour, hatch=hatch[i], edgecolor="white",
                    label=name if i == 0 else None)
            share = v[i] / total[i] if total[i] > 0 else 0
            ax2.barh(y[i], share, left=left_share[i], color=colour, hatch=hatch[i], edgecolor="white")
        left += v
        left_share += np.where(total > 0, v / np.where(total > 0, total, 1), 0)
    lo = b["total_s"] - b["total_min_s"]
    hi = b["total_max_s"] - b["total_s"]
    multi = b["n_runs"] > 1
    ax.errorbar(b["total_s"][multi], y[multi.to_numpy()], xerr=[lo[multi], hi[multi]], fmt="none", ecolor="black",
                capsize=3, lw=1)
    for i, (_, r) in enumerate(b.iterrows()):
        label = f"n={r['n_runs']}" if r["state"] == "ok" else r["state"]
        if math.isfinite(r["total_s"]):
            ax.text(r["total_max_s"] if math.isfinite(r["total_max_s"]) else r["total_s"], y[i], f"  {label}",
                    va="center", fontsize=8)
        else:
            ax.text(0, y[i], f"  {label}: no measured step", va="center", fontsize=8, color="#c0392b")
    ax.set_yticks(y, b["bar"], fontsize=8)
    ax.set_xlabel("seconds per step (median over measured steps, mean over ranks)")
    ax2.set_xlabel("share of the step")
    ax2.set_xlim(0, 1)
    ax2.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{100 * v:.0f}%"))
    ax.set_xlim(0, np.nanmax(b["total_max_s"].to_numpy(dtype=float)) * 1.18 if b["total_max_s"].notna().any() else 1)
    ax.legend(loc="upper center", bbox_to_anchor=(0.8, -0.6 / max(n, 1) - 0.08), ncol=len(present), fontsize=8,
              frameon=False)
    ax.set_title("Step-time closure per configuration")
    for a in (ax, ax2):
        a.grid(axis="x", alpha=0.3)
    data = b[["bar", "config", "state", "runs", "n_runs", *names, "total_s", "total_min_s", "total_max_s"]].copy()
    # CSV columns named after the datasets they come from (ranks/compute_s -> compute_s).
    data = data.rename(columns={nm: col.split("/")[-1] for nm, col, _ in PARTS})
    return save(fig, data, out, fig_info)
