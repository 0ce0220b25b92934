"""Exposed communication against the links' communication-to-compute ratio r, per scheduler and layout: the
share of the step the compute thread waited on communication (median of steps/exposed_comm_frac over the
measured steps), at the r the run was given (`links.comm_to_compute`) or, for a run on a link profile,
the r its links amount to: 4N bytes over the inter-node bandwidth divided by the measured micro-batch
compute time (docs/run.md "Link profiles"). Runs without emulated links (one rank, or links.emulate off)
have no r and are listed, not drawn."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..load import Results, labels
from ..stats import by_run, pct
from .common import PERCENT, STATE_COLOUR, Figure, plt, save, skip, spans_decades, state_note, styles


def ratio(meta: pd.Series, attrs: dict) -> float:
    r = meta.get("links.comm_to_compute")
    if isinstance(r, (int, float)) and r == r and r > 0:
        return float(r)
    try:
        bw = float(attrs["links.inter_bandwidth_gbps"]) * 1e9
        t = float(attrs["compute.micro_batch_s"])
        n = float(attrs["model.num_params"])
        return 4 * n / (bw * t) if bw > 0 and t > 0 else math.nan
    except (KeyError, TypeError, ValueError):
        return math.nan


def paired_axes(res: Results) -> list[str]:
    """Swept keys that change together with links.comm_to_compute, one value of each per value of the other
    (a sweep that ties r to the sequence length): they go with r on the x axis instead of splitting lines."""
    if "links.comm_to_compute" not in res.axes:
        return []
    r = res.runs[res.runs["state"] != "never ran"]
    out = []
    for a in res.axes:
        if a == "links.comm_to_compute" or a not in r or r[a].nunique() < 2:
            continue
        pairs = r[[a, "links.comm_to_compute"]].dropna().astype(str).drop_duplicates()
        if pairs[a].is_unique and pairs["links.comm_to_compute"].is_unique:
            out.append(a)
    return out


def points(res: Results) -> pd.DataFrame:
    frames = by_run(res.long)
    rows = []
    paired = tuple(paired_axes(res))
    for _, meta in res.runs.iterrows():
        f = frames.get(meta["run"])
        if f is None:
            continue
        attrs = res.attrs.get(meta["run"], {})
        emulated = labels.truthy(meta.get("links.emulate")) and int(meta["world_size"]) > 1
        m = f[f["rank"] == 0].set_index("step")
        frac = pct(m["steps/exposed_comm_frac"][m["measured"]], 50) if "steps/exposed_comm_frac" in m else math.nan
        rows.append({"run": meta["run"], "state": meta["state"],
                     "series": res.label(meta, without=("links.comm_to_compute", *paired)),
                     "x_note": ", ".join(f"{a.rsplit('.', 1)[-1]}={labels.value_text(labels.plain(meta[a]))}"
                                         for a in paired),
                     "comm_to_compute": ratio(meta, attrs) if emulated else math.nan,
                     "ratio_source": ("links.comm_to_compute" if (meta.get("links.comm_to_compute") or 0) > 0
                                      else "link profile") if emulated else "no emulated links",
                     "exposed_comm_frac_median": frac,
                     "note": state_note(meta["state"], int(meta["completed_steps"]), meta["planned_steps"])})
    return pd.DataFrame(rows)


def make(res: Results, out) -> Figure:
    info = Figure("exposed_vs_ratio", "Exposed communication against the communication-to-compute ratio",
                  "Share of the step the compute thread waited on communication (median over measured steps) "
                  "against r, the time 4N bytes take on the inter-node link over one micro-batch's compute "
                  "time. Lines join the medians of a scheduler/layout's ok runs; crosses are runs that did not "
                  "finish ok. Runs without emulated links are listed below the axes, not drawn.")
    p = points(res)
    if p.empty:
        return skip(info, "no run completed a step")
    drawn = p[p["comm_to_compute"].notna()]
    if drawn.empty:
        return skip(info, "no run with emulated links (one rank, or links.emulate off)")
    series = list(dict.fromkeys(drawn["series"]))
    if drawn["comm_to_compute"].round(12).nunique() == 1:
        return save(_one_ratio(drawn, series, p), p, out, info)
    style = dict(zip(series, styles(len(series))))
    colour = {s: st["color"] for s, st in style.items()}
    fig, ax = plt.subplots(figsize=(10, 6))
    for s, g in drawn.groupby("series", sort=False):
        ok = g[g["state"] == "ok"]
        ax.plot(ok["comm_to_compute"], ok["exposed_comm_frac_median"], style[s]["marker"], color=colour[s], alpha=0.35,
                ms=5)
        med = ok.groupby("comm_to_compute")["exposed_comm_frac_median"].median().sort_index()
        if len(med):
            ax.plot(med.index, med.to_numpy(), "-", marker=style[s]["marker"], color=colour[s], label=s, lw=1.5, ms=6)
        bad = g[g["state"] != "ok"]
        for k, (_, b) in enumerate(bad.iterrows()):
            if math.isfinite(b["exposed_comm_frac_median"]):
                ax.plot(b["comm_to_compute"], b["exposed_comm_frac_median"], "x", color=colour[s], ms=10, mew=2,
                        label=f"{s} (not ok)" if k == 0 else None)
                ax.annotate(b["note"], (b["comm_to_compute"], b["exposed_comm_frac_median"]), fontsize=7,
                            xytext=(5, 5), textcoords="offset points")
    log = spans_decades(drawn["comm_to_compute"], 8)
    if log:
        ax.set_xscale("log")
    # Ticks at the r values run (and the values paired with them), not at powers of ten.
    ticks = drawn.drop_duplicates("comm_to_compute").sort_values("comm_to_compute")
    ax.set_xticks(ticks["comm_to_compute"], [f"{r:g}" + (f"\n{n}" if n else "") for r, n in
                                             zip(ticks["comm_to_compute"], ticks["x_note"])], fontsize=8)
    ax.xaxis.set_minor_locator(plt.NullLocator())
    paired = [n.split("=")[0] for n in ticks["x_note"].iloc[0].split(", ")] if ticks["x_note"].iloc[0] else []
    ax.set_xlabel("r = inter-node time of 4N bytes / micro-batch compute time" + (" (log scale)" if log else "")
                  + (f"; each r run with its own {', '.join(paired)}" if paired else ""))
    ax.set_ylabel("exposed communication (share of step)")
    ax.yaxis.set_major_formatter(PERCENT)
    ax.set_ylim(0, max(1.0, float(np.nanmax(drawn["exposed_comm_frac_median"].to_numpy(dtype=float)) * 1.05)))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    left_out = p[p["comm_to_compute"].isna()]
    if len(left_out):
        ax.text(0, -0.16, "not drawn (no emulated links): " + ", ".join(left_out["run"]), transform=ax.transAxes,
                fontsize=7, va="top")
    ax.set_title("Exposed communication against r, per scheduler and layout")
    return save(fig, p, out, info)


def _one_ratio(drawn: pd.DataFrame, series: list[str], p: pd.DataFrame):
    """Every run at one r: no relation to draw, so the exposed share per layout at that r, as dots (ok runs,
    their median as a bar) and crosses (runs not ok)."""
    r = float(drawn["comm_to_compute"].iloc[0])
    n = len(series)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.3 * n))
    y = dict(zip(series, np.arange(n)[::-1]))
    for s, g in drawn.groupby("series", sort=False):
        ok = g[g["state"] == "ok"]
        if len(ok):
            ax.barh(y[s], float(ok["exposed_comm_frac_median"].median()), color="#9ecae1", height=0.7)
            ax.plot(ok["exposed_comm_frac_median"], [y[s]] * len(ok), "o", color="#08519c", ms=4)
        for _, b in g[g["state"] != "ok"].iterrows():
            ax.plot(b["exposed_comm_frac_median"], y[s], "x", color=STATE_COLOUR.get(b["state"], "black"), ms=9, mew=2)
            ax.annotate(b["note"], (b["exposed_comm_frac_median"], y[s]), fontsize=7, xytext=(6, -3),
                        textcoords="offset points")
    ax.set_yticks(list(y.values()), list(y.keys()), fontsize=8)
    ax.xaxis.set_major_formatter(PERCENT)
    ax.set_xlim(0, max(1.0, float(np.nanmax(drawn["exposed_comm_frac_median"].to_numpy(dtype=float))) * 1.05))
    ax.set_xlabel("exposed communication (share of step; bar: median of ok runs, dots: runs, x: not ok)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"Exposed communication per layout, all at r = {r:g} (the sweep does not vary r)", fontsize=10)
    left_out = p[p["comm_to_compute"].isna()]
    if len(left_out):
        ax.text(0, -0.8, "not drawn (no emulated links): " + ", ".join(left_out["run"]), fontsize=7, va="top",
                transform=ax.get_yaxis_transform())
    return fig
