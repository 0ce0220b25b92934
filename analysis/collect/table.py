"""The sweep table written as CSV (every number at full precision, empty = not available; pandas writes
and quotes it) and as Markdown (numbers rounded for reading, `–` = not available). Markdown stays our own
few lines: pandas' to_markdown needs the tabulate package and pads every cell, and the cells here are
formatted per column (bytes in KiB/MiB, fractions in %)."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _csv_cell(v: Any) -> str:
    if _missing(v):
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        # Byte counts and step counts are whole numbers carried as floats (NaN = not available).
        return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)
    return str(v)


def _plain(v: Any) -> Any:
    """numpy scalars as Python ones, so the cell formatters see int / float / bool."""
    return v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v


def to_csv(table: pd.DataFrame) -> str:
    return table.map(lambda v: _csv_cell(_plain(v))).to_csv(index=False, lineterminator="\n")


def _md_cell(col: str, v: Any) -> str:
    v = _plain(v)
    if _missing(v):
        return "–"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int) and (col.startswith("bytes_") or col.startswith("mem_")):
        return _bytes(float(v))
    if isinstance(v, float):
        if col.startswith("mfu") or col.startswith("exposed_comm_frac") or col.startswith("slack"):
            return f"{100 * v:.2f}%"
        if col.startswith("bytes_") or col.startswith("mem_"):
            return _bytes(v)
        return f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _bytes(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(b) < 1024:
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.3g} {unit}"
        b /= 1024
    return f"{b:.3g} TiB"


def to_markdown(table: pd.DataFrame, cell=_md_cell) -> str:
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for rec in table.itertuples(index=False, name=None):
        lines.append("| " + " | ".join(cell(c, v) for c, v in zip(cols, rec)) + " |")
    return "\n".join(lines) + "\n"
