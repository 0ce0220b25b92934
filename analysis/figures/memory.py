"""Model-state memory per rank and component (param, grad, master, m, v) of each configuration, as the
allocator measured it after step 0 (`memory/model_state_bytes`), beside the closed form of the paper's
Table 1 (12N/z1 + 4N/z2 + 2N/z3 for asynchzp in bf16-mixed; analysis/paper/forms.py). One panel per
component and one for the total, so a component's bar is read on its own scale. The rank drawn is the one
with the largest total (what must fit); a measured bar above its form by a little is padding."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..load import Results
from ..paper import forms
from .common import NOT_OK_HATCH, Figure, bytes_axis, plt, save, skip

PANELS = [*forms.COMPONENTS, "total"]


def table(res: Results) -> pd.DataFrame:
    """One row per configuration and component: measured bytes (the largest-total rank of the
    configuration's first run that has them, ok runs first), the closed form, and the formula."""
    if res.memory.empty:
        return pd.DataFrame()
    runs = res.runs.set_index("run")
    mem = res.memory
    rows = []
    order = runs.sort_values("state", key=lambda s: s != "ok", kind="stable")
    seen = set()
    for run, meta in order.iterrows():
        if meta["config"] in seen or run not in set(mem["run"]):
            continue
        seen.add(meta["config"])
        m = mem[mem["run"] == run].pivot_table(index="rank", columns="component", values="bytes", aggfunc="first")
        rank = int(m.sum(axis=1).idxmax())
        cfg = meta.to_dict()
        world = int(meta["world_size"])
        n = int(meta["num_params"]) if meta["num_params"] == meta["num_params"] else 0
        form = forms.model_state(cfg, world, n) if n else None
        for comp in PANELS:
            measured = float(m.loc[rank].sum()) if comp == "total" else float(m.loc[rank].get(comp, math.nan))
            closed = (sum(form.values()) if comp == "total" else form[comp]) if form else math.nan
            rows.append({"config": meta["config"], "run": run, "state": meta["state"], "rank": rank,
                         "component": comp, "measured_bytes": measured, "closed_form_bytes": closed,
                         "formula": forms.formula(cfg, world), "num_params": n, "world_size": world,
                         "precision": cfg.get("train.precision")})
    return pd.DataFrame(rows)


def make(res: Results, out) -> Figure:
    info = Figure("memory_state", "Model-state memory per rank against the closed form",
                  "Bytes per rank of each model-state component as the allocator measured them after step 0 "
                  "(bars; the rank with the largest total), and the closed form of the paper's Table 1 (black "
                  "ticks; e.g. 12N/z1 + 4N/z2 + 2N/z3 in bf16-mixed, 16N/W-style forms in fp32, which keeps no "
                  "master copy). A bar slightly past its tick is padding; hatched bars come from runs that "
                  "did not finish ok.")
    t = table(res)
    if t.empty:
        return skip(info, "no run wrote memory/model_state_bytes (it is written after step 0)")
    configs = list(dict.fromkeys(t["config"]))
    n = len(configs)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(3.0 * len(PANELS) + 3, 1.4 + 0.38 * n), sharey=True,
                             layout="constrained")
    y = np.arange(n)[::-1]
    for ax, comp in zip(axes, PANELS):
        sub = t[t["component"] == comp].set_index("config").loc[configs]
        meas = sub["measured_bytes"].to_numpy(dtype=float)
        hatch = [None if s == "ok" else NOT_OK_HATCH for s in sub["state"]]
        for i in range(n):
            ax.barh(y[i], meas[i], color="#6baed6" if comp != "total" else "#2171b5", hatch=hatch[i],
                    edgecolor="white")
            if meas[i] == 0 and np.nanmax(meas) > 0:
                ax.text(0, y[i], " 0 B", va="center", fontsize=7)
        cf = sub["closed_form_bytes"].to_numpy(dtype=float)
        # A tall tick marks the form's exact value (a diamond's width hides whether the bar reaches it).
        ax.plot(cf, y, "|", color="black", ms=14, mew=2, label="closed form (Table 1)")
        top = float(np.nanmax(np.concatenate([meas, cf, [0]])))
        ax.set_xlim(0, top * 1.1 if top > 0 else 1)
        bytes_axis(ax, top)
        ax.set_title(comp if comp != "total" else "total model state")
        ax.tick_params(axis="x", labelsize=7, rotation=30)
        ax.grid(axis="x", alpha=0.3)
        if top == 0:
            ax.text(0.5, 0.5, "0 B in every run\n(fp32 keeps no separate\nmaster copy)" if comp == "master" else
                    "0 B in every run", transform=ax.transAxes, ha="center", va="center", fontsize=8)
    axes[0].set_yticks(y, configs, fontsize=8)
    axes[-1].legend(fontsize=7, loc="lower right")
    for i, c in enumerate(configs):
        f = t[(t["config"] == c) & (t["component"] == "total")].iloc[0]
        axes[-1].text(axes[-1].get_xlim()[1], y[i], f"  {f['formula']}", va="center", fontsize=7)
    fig.suptitle("Model-state bytes per rank (measured after step 0) against the closed form")
    return save(fig, t, out, info)
