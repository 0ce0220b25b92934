"""Loss curves of every run overlaid, with the data's entropy floor (the lowest loss any model can reach on
the synthetic source, recorded by the run), and below them each run's loss minus that of the `none`
reference trained on the same problem (same model, data and training keys; the scheduler, topology and
links may differ), step by step. A sweep without such a `none` run gets, instead and labelled as such, the
difference to the median of its ok runs on the same problem at each step: whether the layouts agree.
A run that is not ok is drawn dashed and ends in a cross at its last finite loss, named by its state."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..load import Results, labels
from matplotlib.ticker import MaxNLocator

from .common import Figure, plt, save, skip, state_note, styles

# Keys that do not change what is trained: a run matches a `none` run when every other key is equal.
NOT_THE_PROBLEM = ("scheduler.", "topology.", "links.", "output.", "collectives.", "debug.", "harness.", "device.",
                   "threads.")


def _problem(row: pd.Series, keys: list[str]) -> tuple:
    return tuple(repr(labels.plain(row.get(k))) for k in keys if not k.startswith(NOT_THE_PROBLEM))


def curves(res: Results) -> pd.DataFrame:
    """run, step, loss (rank 0's row: steps/loss is one value per step)."""
    if res.long.empty or "steps/loss" not in res.long:
        return pd.DataFrame(columns=["run", "step", "loss"])
    l = res.long[res.long["rank"] == 0][["run", "step", "steps/loss"]].rename(columns={"steps/loss": "loss"})
    return l.reset_index(drop=True)


def make(res: Results, out) -> Figure:
    info = Figure("loss", "Loss curves",
                  "Top: training loss per step of every run (nats/token), with the data's entropy floor dotted. "
                  "Bottom: loss minus that of the `none` run on the same problem at the same step (without "
                  "one in the sweep: minus the median of the ok runs, as the axis says). Dashed "
                  "lines ending in a cross are runs that did not finish ok.")
    c = curves(res)
    if c.empty:
        return skip(info, "no run completed a step")
    runs = res.runs.set_index("run")
    keys = res.config_keys
    refs: dict[tuple, str] = {}
    for run, row in runs.iterrows():
        if row.get("scheduler.name") == "none" and row["state"] == "ok" and run in set(c["run"]):
            refs.setdefault(_problem(row, keys), run)
    configs = list(dict.fromkeys(runs.loc[c["run"].unique(), "config"]))
    style = dict(zip(configs, styles(len(configs))))
    # The fallback reference: per problem and step, the median loss of the ok runs.
    c = c.assign(_problem=[_problem(runs.loc[r], keys) for r in c["run"]], _ok=c["run"].map(runs["state"]) == "ok")
    okc = c[c["_ok"]]
    # Only a problem with at least two ok runs has a median to differ from (one run would be its own zero).
    shared = okc.groupby("_problem")["run"].nunique()
    medians = okc[okc["_problem"].map(shared) >= 2].groupby(["_problem", "step"])["loss"].median()
    use_none = bool(refs)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 8), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    rows = []
    diffs: list[tuple] = []      # drawn after the scale is known
    for run, g in c.groupby("run", sort=False):
        meta = runs.loc[run]
        ok = meta["state"] == "ok"
        ls = "-" if ok else "--"
        label = run if ok else f"{run} ({state_note(meta['state'], int(meta['completed_steps']), meta['planned_steps'])})"
        st = style[meta["config"]]
        col = st["color"]
        mk = st["marker"] if len(style) > 10 or len(g) < 12 else None
        ax.plot(g["step"], g["loss"], ls=ls, color=col, marker=mk, ms=4, lw=1.3, label=label)
        if not ok:
            finite = g[np.isfinite(g["loss"])]
            if len(finite):
                ax.plot(finite["step"].iloc[-1], finite["loss"].iloc[-1], "x", color=col, ms=9, mew=2)
        problem = _problem(meta, keys)
        ref = refs.get(problem)
        diff = pd.Series(math.nan, index=g.index)
        if ref is not None and ref != run:
            base = c[c["run"] == ref].set_index("step")["loss"]
            diff = g["loss"] - g["step"].map(base)
        to_median = g["loss"] - pd.Series([medians.get((problem, s), math.nan) for s in g["step"]], index=g.index)
        shown = diff if use_none else to_median
        if np.isfinite(shown).any():
            diffs.append((g["step"], shown, ls, col, mk))
        rows.append(pd.DataFrame({"run": run, "config": meta["config"], "state": meta["state"], "step": g["step"],
                                  "loss": g["loss"], "none_run": ref if ref != run else None,
                                  "loss_minus_none": diff, "loss_minus_median_ok": to_median,
                                  "entropy_floor": res.attrs.get(run, {}).get("entropy_floor", math.nan)}))
    floors = sorted({round(float(a["entropy_floor"]), 6) for a in res.attrs.values() if "entropy_floor" in a})
    for fl in floors:
        ax.axhline(fl, color="black", ls=":", lw=1.2)
        ax.text(ax.get_xlim()[0], fl, f" entropy floor {fl:.4g}", va="bottom", fontsize=8)
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("Loss of every run")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    # Differences are often 1e-9 or smaller: scale them into the label, where matplotlib's offset text
    # (a small "1e-9" above the axis) is easily missed.
    biggest = max((float(np.nanmax(np.abs(d))) for _, d, _, _, _ in diffs), default=0.0)
    exp = int(math.floor(math.log10(biggest))) if biggest > 0 else 0
    scale = 10.0 ** exp if exp < -2 else 1.0
    for x, d, ls, col, mk in diffs:
        ax2.plot(x, d / scale, ls=ls, color=col, marker=mk, ms=4, lw=1.3)
    ax2.axhline(0, color="black", lw=0.8)
    what = "loss − loss of none" if use_none else "loss − median of the ok runs\n(no `none` run in this sweep)"
    ax2.set_ylabel(what + "\n" + (f"(×1e{exp} nats/token)" if scale != 1.0 else "(nats/token)"))
    ax2.set_xlabel("step (from 0, as in the results file)")
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.grid(alpha=0.3)
    if not diffs:
        ax2.text(0.5, 0.5, "no reference on the same problem: no difference to draw",
                 transform=ax2.transAxes, ha="center", va="center", fontsize=9, color="#555555")
    data = pd.concat(rows, ignore_index=True)
    return save(fig, data, out, info)
