"""Bytes each rank sends per step on each link level (intra- and inter-node), against the sequence length and
against the micro-batches each rank runs per step: the paper's §4.4 argument that sharded-state traffic is
set by the weights, not by the tokens, and that asynchzp's cross-group traffic happens once per step (it
does not grow with gradient accumulation), while zero3 over the whole world gathers every micro-batch.
Bytes are `comm/<op>/<level>/bytes` summed over ops, mean over ranks, median over the measured steps."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from ..load import Results, labels
from ..stats import by_run, level_bytes, measured, pct
from .common import BYTES, Figure, bytes_axis, palette, plt, save, skip, spans_decades

LEVEL_STYLE = {"intra": "-", "inter": "--"}


def per_run(res: Results) -> pd.DataFrame:
    frames = by_run(res.long)
    rows = []
    for _, meta in res.runs.iterrows():
        f = frames.get(meta["run"])
        if f is None or int(meta["world_size"]) < 2:
            continue
        world = int(meta["world_size"])
        cfg = meta.to_dict()
        try:
            m = int(cfg["train.global_batch"]) / int(cfg["train.micro_batch_size"]) / world
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            m = math.nan
        series = res.label(meta, without=("model.seq_len", "train.global_batch", "train.micro_batch_size"))
        for level in res.levels:
            b = level_bytes(f, res.datasets[meta["run"]], level)
            rows.append({"run": meta["run"], "state": meta["state"], "series": series, "level": level,
                         "seq_len": cfg.get("model.seq_len"), "micro_batches_per_rank": m,
                         "bytes_per_rank_step": pct(b[measured(f)], 50)})
    return pd.DataFrame(rows)


def make(res: Results, out) -> Figure:
    info = Figure("comm_scaling", "Bytes per step and link level against sequence length and micro-batches",
                  "Bytes one rank sends per step on each link level (solid: intra-node, dashed: inter-node; "
                  "median over measured steps, mean over ranks) against the sequence length (left) and the "
                  "micro-batches each rank runs per step (right). Flat lines: traffic set by the weights, not "
                  "the tokens (arXiv 2510.20111 §4.4). Runs at one rank move nothing and are left out.")
    p = per_run(res)
    if p.empty:
        return skip(info, "no multi-rank run completed a step")
    series = list(dict.fromkeys(p["series"]))
    colour = dict(zip(series, palette(len(series))))
    fig, axes = plt.subplots(1, 2, figsize=(14, 6), sharey=True)
    for ax, x, other, xlabel, short in (
            (axes[0], "seq_len", "micro_batches_per_rank", "sequence length (tokens)", "m"),
            (axes[1], "micro_batches_per_rank", "seq_len", "micro-batches per rank per step", "seq")):
        # A line joins runs that differ in this panel's x only: the other variable is part of its name and
        # sets the marker, so two lines of one colour stay apart.
        markers = dict(zip(sorted(p[other].dropna().unique()), "os^Dv<>p*h"))
        for (s, level, o), g in p.groupby(["series", "level", other], sort=False, dropna=False):
            ok = g[g["state"] == "ok"]
            med = ok.groupby(x)["bytes_per_rank_step"].median().sort_index()
            if len(med):
                ax.plot(med.index, med.to_numpy(), LEVEL_STYLE.get(level, ":"), marker=markers.get(o, "o"),
                        color=colour[s], label=f"{s}, {short}={o:g} — {level}")
            bad = g[g["state"] != "ok"]
            if len(bad):
                ax.plot(bad[x], bad["bytes_per_rank_step"], "x", color=colour[s], ms=9, mew=2,
                        label=f"{s}, {short}={o:g} — {level} (not ok: " + ", ".join(bad["state"]) + ")")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.12), frameon=False)
        xs = p[x].dropna()
        if spans_decades(xs, 3):
            ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        if ax.get_xscale() != "log":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xlabel + (" (log scale)" if ax.get_xscale() == "log" else ""))
        if len(xs.unique()) < 2:
            ax.text(0.5, 0.02, f"only one value of {x} in these runs", transform=ax.transAxes, ha="center",
                    fontsize=8, color="#555555")
        ax.grid(alpha=0.3, which="both")
    positive = p["bytes_per_rank_step"][p["bytes_per_rank_step"] > 0]
    if spans_decades(positive):
        # symlog, not log: a level a layout never uses (0 bytes) stays on the axis instead of vanishing.
        axes[0].set_yscale("symlog", linthresh=float(positive.min()))
        axes[0].yaxis.set_major_formatter(BYTES)
    else:
        top = float(p["bytes_per_rank_step"].max())
        axes[0].set_ylim(0, top * 1.08 if top > 0 else 1)
        bytes_axis(axes[0], top, "y")
    axes[0].set_ylabel("bytes sent per rank per step" + (" (log scale; 0 at the bottom)" if axes[0].get_yscale() == "symlog" else ""))
    fig.suptitle("Bytes per step on each link level", y=1.0)
    return save(fig, p, out, info)
