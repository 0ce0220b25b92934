"""The caching allocator over the steps of every run (docs/run.md "Metrics"): bytes allocated at the end of a
step and reserved from the system, the slack 1 − allocated/reserved and the external fragmentation
1 − largest free block / free bytes; each the mean over ranks. Runs of one configuration share a colour;
a run that is not ok is dashed."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..load import Results
from matplotlib.ticker import MaxNLocator

from .common import PERCENT, Figure, bytes_axis, bytes_log_axis, plt, save, skip, spans_decades, styles

SERIES = [("ranks/mem_allocated_bytes", "allocated", True), ("ranks/mem_reserved_bytes", "reserved", True),
          ("ranks/slack", "slack", False), ("ranks/ext_frag", "ext_frag", False)]


def per_step(res: Results) -> pd.DataFrame:
    cols = [c for c, _, _ in SERIES if c in res.long]
    if res.long.empty or not cols:
        return pd.DataFrame()
    g = res.long.groupby(["run", "step"], sort=False, observed=True)
    mean = g[cols].mean()
    # A step with a fill value on some rank stays NaN, not the mean of the others.
    mean = mean.where(g[cols].count() == g[cols].size().to_numpy()[:, None])
    peak = g["ranks/mem_peak_bytes"].max() if "ranks/mem_peak_bytes" in res.long else None
    out = mean.rename(columns={c: n for c, n, _ in SERIES}).reset_index()
    if peak is not None:
        out["peak_max_over_ranks"] = peak.to_numpy()
    meta = res.runs.set_index("run")
    out.insert(1, "config", out["run"].map(meta["config"]))
    out.insert(2, "state", out["run"].map(meta["state"]))
    return out


def make(res: Results, out) -> Figure:
    info = Figure("fragmentation", "Allocator memory and fragmentation over steps",
                  "Per step, mean over ranks: bytes allocated at the step's end and reserved from the system "
                  "(top), slack = 1 − allocated/reserved and external fragmentation = 1 − largest free block / "
                  "free bytes (bottom). One colour per configuration; dashed = a run that did not finish ok.")
    d = per_step(res)
    if d.empty:
        return skip(info, "no run completed a step")
    configs = list(dict.fromkeys(d["config"]))
    style = dict(zip(configs, styles(len(configs))))
    colour = {c: st["color"] for c, st in style.items()}
    fig, axes = plt.subplots(2, 2, figsize=(13, 8), sharex=True)
    for ax, (_, name, is_bytes) in zip(axes.flat, SERIES):
        if name not in d:
            ax.text(0.5, 0.5, f"no {name} series", transform=ax.transAxes, ha="center")
            continue
        for run, g in d.groupby("run", sort=False):
            ok = g["state"].iloc[0] == "ok"
            # Runs that are not ok on top, dashed, with a cross at their last step: never hidden behind an ok run.
            cfg = g["config"].iloc[0]
            ax.plot(g["step"], g[name], ls="-" if ok else "--", color=colour[cfg], lw=1.2, ms=4,
                    marker=style[cfg]["marker"] if len(style) > 10 or len(g) < 12 else None, zorder=2 if ok else 3)
            if not ok:
                ax.plot(g["step"].iloc[-1], g[name].iloc[-1], "x", color=colour[g["config"].iloc[0]], ms=8, mew=2,
                        zorder=3)
        if is_bytes:
            if spans_decades(d[name]):
                bytes_log_axis(ax, d[name], "y")
                ax.set_title(f"{name} (mean over ranks, log scale)")
            else:
                top = float(d[name].max())
                ax.set_ylim(0, top * 1.08)
                bytes_axis(ax, top, "y")
                ax.set_title(f"{name} (mean over ranks)")
        else:
            ax.yaxis.set_major_formatter(PERCENT)
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{name} (mean over ranks)")
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("step (from 0)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = [plt.Line2D([], [], color=colour[c], marker=style[c]["marker"] if len(style) > 10 else None, ms=4)
               for c in configs]
    handles += [plt.Line2D([], [], color="black"), plt.Line2D([], [], color="black", ls="--", marker="x")]
    fig.legend(handles, [*configs, "run ended ok", "run not ok (cross: its last step)"], loc="upper left",
               bbox_to_anchor=(1.0, 0.95), fontsize=7, frameon=False)
    fig.tight_layout()
    return save(fig, d, out, info)
