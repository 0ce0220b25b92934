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
from .common import Figure, bytes_axis, bytes_log_axis, palette, plt, save, skip, spans_decades

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
        # Bytes do not depend on link speeds: a link axis (e.g. a ratio tied to the length) does not split lines.
        series = res.label(meta, without=("model.seq_len", "train.global_batch", "train.micro_batch_size",
                                          *[a for a in res.axes if a.startswith("links.")]))
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
    panels = [(x, other, xlabel, short) for x, other, xlabel, short in (
        ("seq_len", "micro_batches_per_rank", "sequence length (tokens)", "m"),
        ("micro_batches_per_rank", "seq_len", "micro-batches per rank per step", "seq")) if p[x].nunique() > 1]
    if not panels:
        return save(*_bars(p, series), out, info)
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 6), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (x, other, xlabel, short) in zip(axes, panels):
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
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.12), frameon=False, handlelength=4)
        if spans_decades(p[x].dropna(), 3):
            ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        if ax.get_xscale() != "log":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xlabel + (" (log scale)" if ax.get_xscale() == "log" else ""))
        ax.grid(alpha=0.3, which="both")
    _bytes_scale(axes[0], p["bytes_per_rank_step"], "y")
    scale = axes[0].get_yscale()
    axes[0].set_ylabel("bytes sent per rank per step" + {"symlog": " (log scale; 0 at the bottom)",
                                                         "log": " (log scale)"}.get(scale, ""))
    fig.suptitle("Bytes per step on each link level", y=1.0)
    return save(fig, p, out, info)


def _bytes_scale(ax, values: pd.Series, which: str) -> None:
    positive = values[values > 0]
    if spans_decades(positive):
        bytes_log_axis(ax, values, which)
    else:
        top = float(values.max())
        (ax.set_ylim if which == "y" else ax.set_xlim)(0, top * 1.08 if top > 0 else 1)
        bytes_axis(ax, top, which)


def _bars(p: pd.DataFrame, series: list[str]):
    """Neither the sequence length nor the micro-batches vary: bytes per level per layout, as bars."""
    levels = list(dict.fromkeys(p["level"]))
    n = len(series)
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.3 * n * max(len(levels), 1) / 1.5))
    y = np.arange(n)[::-1]
    h = 0.8 / max(len(levels), 1)
    colours = {"intra": "#4393c3", "inter": "#d6604d"}
    for k, level in enumerate(levels):
        sub = p[p["level"] == level].groupby("series", sort=False)
        vals = [float(sub.get_group(s)["bytes_per_rank_step"].median()) if s in sub.groups else np.nan
                for s in series]
        ax.barh(y + (len(levels) - 1 - 2 * k) * h / 2, vals, height=h, color=colours.get(level), label=level)
    ax.set_yticks(y, series, fontsize=8)
    _bytes_scale(ax, p["bytes_per_rank_step"], "x")
    ax.set_xlabel("bytes sent per rank per step" + {"symlog": " (log scale; 0 at the left)",
                                                    "log": " (log scale)"}.get(ax.get_xscale(), ""))
    seq, m = p["seq_len"].iloc[0], p["micro_batches_per_rank"].iloc[0]
    ax.set_title(f"Bytes per step on each link level (sequence length {seq:g} and {m:g} micro-batch(es) per rank "
                 "in every run: neither swept)", fontsize=10)
    ax.legend(title="link level", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return fig, p
