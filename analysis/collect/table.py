"""The sweep table written as CSV (every number at full precision, empty = not available) and as Markdown
(numbers rounded for reading, `–` = not available)."""
from __future__ import annotations

import csv
import io
import math
from typing import Any


def _csv_cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        # Byte counts and step counts are whole numbers carried as floats (NaN = not available).
        return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)
    return str(v)


def to_csv(columns: list[str], rows: list[dict]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_csv_cell(r.get(c)) for c in columns])
    return out.getvalue()


def _md_cell(col: str, v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
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


def to_markdown(columns: list[str], rows: list[dict]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_md_cell(c, r.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"
