"""Writes a flat {dotted key: value} configuration as a TOML config file hzpbench reads back to the same values.

The standard library reads TOML (tomllib) but does not write it; a task's configuration only holds
scalars and lists of them, which this covers exactly (and refuses anything else).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if any(c in r for c in ".en") else r + ".0"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)   # JSON's escapes are TOML basic-string escapes
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} value {v!r} as a TOML config value")


def key(k: str) -> str:
    return ".".join(s if _BARE.match(s) else json.dumps(s) for s in k.split("."))


def dumps(config: dict[str, Any], header: str = "") -> str:
    lines = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []
    lines += [f"{key(k)} = {value(v)}" for k, v in sorted(config.items())]
    return "\n".join(lines) + "\n"
