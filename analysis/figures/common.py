"""What every figure shares: the headless backend, how a figure and its CSV are saved side by side, the
colours and marks of run states (a failed, killed or diverged run is drawn as such, never dropped), byte
axes in binary units, and when an axis needs a log scale."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")       # no display: figures are files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

DPI = 110
STATE_COLOUR = {"ok": "#2b7a3d", "diverged": "#7b3294", "failed": "#c0392b", "killed": "#e67e22",
                "running": "#7f8c8d", "unreadable": "#34495e", "never ran": "#bdc3c7"}
NOT_OK_HATCH = "///"


@dataclasses.dataclass
class Figure:
    stem: str           # file name without extension: <stem>.png, <stem>.csv
    title: str
    caption: str        # what is drawn, from what, and how to read it (the report prints it)
    png: Path | None = None
    csv: Path | None = None
    skipped: str = ""   # why nothing was drawn (no runs of the kind it needs)


def save(fig, data: pd.DataFrame, out: Path, figure: Figure) -> Figure:
    out.mkdir(parents=True, exist_ok=True)
    figure.png = out / f"{figure.stem}.png"
    figure.csv = out / f"{figure.stem}.csv"
    fig.savefig(figure.png, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    data.to_csv(figure.csv, index=False, lineterminator="\n")
    return figure


def skip(figure: Figure, why: str) -> Figure:
    figure.skipped = why
    return figure


def human_bytes(b: float) -> str:
    if b is None or not math.isfinite(b):
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(b) < 1024 or unit == "TiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.3g} {unit}"
        b /= 1024
    return f"{b:.3g} TiB"


BYTES = FuncFormatter(lambda v, _: human_bytes(v))
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def bytes_axis(ax, vmax: float, which: str = "x") -> None:
    """A linear byte axis with round ticks in one binary unit (0, 200, 400 KiB ...), not matplotlib's
    decimal ticks printed in KiB (195 KiB, 391 KiB ...)."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    if not (vmax and math.isfinite(vmax) and vmax > 0):
        axis.set_ticks([0])
        axis.set_major_formatter(FuncFormatter(lambda v, _: "0 B"))
        return
    k = min(int(math.log(vmax, 1024)) if vmax >= 1 else 0, len(_UNITS) - 1)
    unit = 1024.0 ** k
    ticks = MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]).tick_values(0, vmax / unit)
    ticks = [t for t in ticks if 0 <= t <= vmax / unit * 1.0001]
    axis.set_ticks([t * unit for t in ticks])
    axis.set_major_formatter(FuncFormatter(lambda v, _: "0" if v == 0 else f"{v / unit:g} {_UNITS[k]}"))
PERCENT = FuncFormatter(lambda v, _: f"{100 * v:.0f}%")


def bytes_log_axis(ax, values, which: str = "y") -> None:
    """A log byte axis with ticks at powers of two (32 MiB, 64 MiB ...; decimal decades print as 9.54 MiB,
    95.4 MiB). symlog when some value is 0, so a level a layout never uses stays on the axis."""
    a = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    positive = a[a > 0]
    axis = ax.yaxis if which == "y" else ax.xaxis
    scale = ax.set_yscale if which == "y" else ax.set_xscale
    if (a == 0).any():
        scale("symlog", base=2, linthresh=float(positive.min()) if positive.size else 1.0)
    else:
        scale("log", base=2)
    axis.set_major_formatter(BYTES)
    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def spans_decades(values, factor: float = 20.0) -> bool:
    """Positive values whose largest is more than `factor` times the smallest: draw them on a log scale."""
    a = np.asarray([v for v in values if v is not None and np.isfinite(v) and v > 0], dtype=float)
    return a.size > 1 and a.max() / a.min() > factor


def state_note(state: str, completed: int, planned) -> str:
    """'killed after 5 of 100000 steps', 'failed at step 3', 'diverged at step 4'."""
    if state == "ok":
        return "ok"
    if state == "killed":
        return f"killed after {completed} of {planned} steps" if planned else f"killed after {completed} steps"
    if state in ("failed", "diverged"):
        return f"{state} at step {completed}" if state == "failed" else f"{state} at step {max(completed - 1, 0)}"
    return state


def palette(n: int) -> list:
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


MARKERS = "osD^vP*Xph<>"


def styles(n: int) -> list[dict]:
    """n distinct (colour, marker) pairs: beyond the palette's 10 or 20 colours the marker changes, so two
    series never look alike (a sweep of 40 layouts has 40 lines)."""
    colours = palette(n)
    size = 10 if n <= 10 else 20
    return [{"color": colours[i], "marker": MARKERS[(i // size) % len(MARKERS)]} for i in range(n)]
