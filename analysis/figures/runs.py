"""Every run of the sweep and how it ended: steps completed (bar, coloured by state) against steps planned,
with the status text of every run that is not ok. Unreadable files and tasks that never ran are rows too."""
from __future__ import annotations

import numpy as np

from ..load import Results
from .common import STATE_COLOUR, Figure, plt, save, skip, state_note


def make(res: Results, out) -> Figure:
    info = Figure("runs", "Runs and how they ended",
                  "One bar per results file (and per task of the sweep that has none): steps completed, "
                  "coloured by how the run ended; the text gives the steps planned and, for runs that are not ok, "
                  "their status.")
    r = res.runs
    if r.empty:
        return skip(info, "no runs")
    n = len(r)
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.32 * n))
    y = np.arange(n)[::-1]
    done = r["completed_steps"].fillna(0).astype(float).to_numpy()
    colours = [STATE_COLOUR.get(s, "#7f8c8d") for s in r["state"]]
    ax.barh(y, np.maximum(done, 0.0), color=colours)
    texts = []
    for i, (_, row) in enumerate(r.iterrows()):
        p = row["planned_steps"]
        p = int(p) if p == p and p is not None else None
        note = state_note(row["state"], int(done[i]), p)
        if row["state"] == "ok":
            note = f"ok: {int(done[i])} of {p} steps"
        elif row["state"] == "failed" and row["reason"]:
            note += f": {row['reason']}"
        elif row["state"] in ("unreadable", "never ran"):
            note = row["status"]
        texts.append(note if len(note) < 110 else note[:107] + "...")
        ax.text(max(done[i], 0), y[i], "  " + texts[-1], va="center", fontsize=8)
    # Linear: the bars are steps completed; the steps planned (which may span decades) are in the text.
    ax.set_xlabel("steps completed")
    ax.set_xlim(0, max(done.max(), 1) * 2.6)
    ax.set_yticks(y, r["run"], fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=STATE_COLOUR[s]) for s in STATE_COLOUR if s in set(r["state"])]
    ax.legend(handles, [s for s in STATE_COLOUR if s in set(r["state"])], loc="lower right", fontsize=8)
    counts = r["state"].value_counts()
    ax.set_title("Runs: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    data = r[["run", "file", "state", "status", "completed_steps", "planned_steps", "config"]].copy()
    return save(fig, data, out, info)
