"""Cells of the report's tables: numbers rounded for reading, units stated, `–` for not available."""
from __future__ import annotations

import math

from ..figures.common import human_bytes


def missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def num(v, digits: int = 4) -> str:
    return "–" if missing(v) else f"{float(v):.{digits}g}"


def count(v) -> str:
    return "–" if missing(v) else f"{int(v)}"


def pct(v, digits: int = 1) -> str:
    return "–" if missing(v) else f"{100 * float(v):.{digits}f}%"


def nbytes(v) -> str:
    return "–" if missing(v) else human_bytes(float(v))


def exact_bytes(v) -> str:
    return "–" if missing(v) else f"{int(round(float(v)))}"


def seconds(v) -> str:
    if missing(v):
        return "–"
    v = float(v)
    return f"{v * 1000:.3g} ms" if v < 1 else f"{v:.3g} s"


def duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else f"{s // 60} min {s % 60:02d} s" if s >= 60 \
        else f"{s} s"
