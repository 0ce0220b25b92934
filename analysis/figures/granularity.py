"""The shard-granularity ablation the paper does not run: asynchzp's optimizer, gradient and parameter
group sizes (z1, z2, z3; arXiv 2510.20111 §4.1.1) against step time, exposed communication and memory per
rank, as heat maps: rows z1, columns (z2, z3), one column of panels per scheduling mode (async, inline).

A cell is the median over the ok runs of that layout; a layout whose runs all failed is hatched and named by
its state; a combination hzpbench refuses (z2 not dividing z1, z3 not dividing z2) is grey, one the sweep
did not run is blank. Memory per rank is the allocator's peak (max over ranks and steps) and the
model state (the largest rank's total after step 0)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..load import Results, labels
from ..stats import by_run, pct
from .common import Figure, plt, save, skip

METRICS = [("step_time_s", "step time (s)", 1.0, "{:.3g}"),
           ("exposed_comm_frac", "exposed comm. (% of step)", 100.0, "{:.0f}"),
           ("peak_mib", "peak allocated (MiB/rank)", 1.0, "{:.3g}"),
           ("model_state_mib", "model state (MiB/rank)", 1.0, "{:.3g}")]


def per_run(res: Results) -> pd.DataFrame:
    frames = by_run(res.long)
    rows = []
    runs = res.runs[res.runs["scheduler.name"] == "asynchzp"] if "scheduler.name" in res.runs else res.runs.iloc[:0]
    for _, meta in runs.iterrows():
        cfg = meta.to_dict()
        world = int(meta["world_size"] or 0)
        z1, z2, z3 = labels.groups(cfg, world)
        row = {"run": meta["run"], "state": meta["state"], "world_size": world, "z1": z1, "z2": z2, "z3": z3,
               "async": labels.truthy(cfg.get("scheduler.async", True)),
               "step_time_s": math.nan, "exposed_comm_frac": math.nan, "peak_mib": math.nan,
               "model_state_mib": math.nan}
        f = frames.get(meta["run"])
        if f is not None:
            r0 = f[f["rank"] == 0].set_index("step")
            row["step_time_s"] = pct(r0["steps/step_time_s"][r0["measured"]], 50)
            row["exposed_comm_frac"] = pct(r0["steps/exposed_comm_frac"][r0["measured"]], 50)
            if "ranks/mem_peak_bytes" in f:
                row["peak_mib"] = float(f["ranks/mem_peak_bytes"].max()) / 2**20
        mem = res.memory[res.memory["run"] == meta["run"]]
        if len(mem):
            row["model_state_mib"] = float(mem.groupby("rank")["bytes"].sum().max()) / 2**20
        rows.append(row)
    return pd.DataFrame(rows)


def cells(p: pd.DataFrame) -> pd.DataFrame:
    """One row per (async, z1, z2, z3): medians over ok runs, how many runs, and the states of the rest."""
    out = []
    for key, g in p.groupby(["async", "z1", "z2", "z3"], sort=True):
        ok = g[g["state"] == "ok"]
        row = dict(zip(["async", "z1", "z2", "z3"], key))
        row.update({m: float(ok[m].median()) if len(ok) else math.nan for m, *_ in METRICS})
        row["ok_runs"] = len(ok)
        row["runs"] = " ".join(g["run"])
        row["not_ok"] = ", ".join(f"{r['run']}: {r['state']}" for _, r in g[g["state"] != "ok"].iterrows())
        out.append(row)
    return pd.DataFrame(out)


def make(res: Results, out) -> Figure:
    info = Figure("granularity", "Shard granularity: asynchzp's (z1, z2, z3)",
                  "Heat maps over asynchzp's group sizes: rows z1 (optimizer states), columns (z2 gradients, "
                  "z3 parameters); one column of panels per mode (background threads = async, or inline). "
                  "Each cell: median over the layout's ok runs; colours from 0 to the largest value, one scale per metric. Grey: a combination hzpbench refuses; blank: not "
                  "run; hatched: every run of the layout failed or was killed.")
    p = per_run(res)
    if p.empty:
        return skip(info, "no asynchzp runs in these results")
    c = cells(p)
    z1s = sorted(c["z1"].unique())
    pairs = sorted({(a, b) for a, b in zip(c["z2"], c["z3"])})
    modes = sorted(c["async"].unique(), reverse=True)
    fig, axes = plt.subplots(len(METRICS), len(modes), figsize=(max(1.1 * len(pairs) * len(modes) + 3, 9),
                                                                 1.0 + len(METRICS) * (0.55 * len(z1s) + 1.2)),
                             squeeze=False, layout="constrained")
    for j, mode in enumerate(modes):
        sub = c[c["async"] == mode].set_index(["z1", "z2", "z3"])
        for i, (metric, title, scale, fmt) in enumerate(METRICS):
            ax = axes[i][j]
            # One colour scale per metric across both modes, so async and inline compare by colour too, and
            # from 0: a colour then shows a value's size, not its rank between the smallest and the largest
            # (a 15% spread would otherwise span the whole palette).
            vals = c[metric].to_numpy(dtype=float) * scale
            vmin, vmax = (0.0, float(np.nanmax(vals))) if np.isfinite(vals).any() else (0.0, 1.0)
            grid = np.full((len(z1s), len(pairs)), np.nan)
            for a, z1 in enumerate(z1s):
                for b, (z2, z3) in enumerate(pairs):
                    if (z1, z2, z3) in sub.index:
                        grid[a, b] = sub.loc[(z1, z2, z3), metric] * scale
            im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", aspect="auto", origin="lower",
                           vmin=vmin, vmax=vmax if vmax > vmin else vmin + 1)
            if j == len(modes) - 1:
                fig.colorbar(im, ax=list(axes[i]), fraction=0.03, pad=0.02).ax.tick_params(labelsize=7)
            for a, z1 in enumerate(z1s):
                for b, (z2, z3) in enumerate(pairs):
                    if z1 % z2 or z2 % z3:
                        ax.add_patch(plt.Rectangle((b - 0.5, a - 0.5), 1, 1, color="#d9d9d9"))
                        ax.text(b, a, "—", ha="center", va="center", fontsize=7, color="#777777")
                    elif (z1, z2, z3) not in sub.index:
                        ax.text(b, a, "not run", ha="center", va="center", fontsize=6, color="#777777")
                    elif math.isnan(grid[a, b]):
                        ax.add_patch(plt.Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, hatch="///",
                                                   edgecolor="#c0392b"))
                        state = sub.loc[(z1, z2, z3), "not_ok"].split(": ")[-1] or "no value"
                        ax.text(b, a, state, ha="center", va="center", fontsize=6, color="#c0392b")
                    else:
                        v = grid[a, b]
                        light = v < vmin + 0.6 * ((vmax - vmin) or 1)
                        ax.text(b, a, fmt.format(v), ha="center", va="center", fontsize=7,
                                color="white" if light else "black")
            ax.set_xticks(range(len(pairs)), [f"{z2}/{z3}" for z2, z3 in pairs], fontsize=7)
            ax.set_yticks(range(len(z1s)), [str(z) for z in z1s], fontsize=7)
            ax.set_ylabel("z1 (optimizer group)", fontsize=8)
            if i == len(METRICS) - 1:
                ax.set_xlabel("z2/z3 (gradient / parameter group)", fontsize=8)
            ax.set_title(f"{title} — {'async' if mode else 'inline'}", fontsize=9)
    world = sorted(p["world_size"].unique())
    fig.suptitle(f"asynchzp shard granularity at W = {', '.join(map(str, world))} (colour scale shared by both modes)")
    return save(fig, c, out, info)
