"""Names for what a run configured, as a reader of a figure or table wants to see them: the scheduler's
layout ("hsdp Z=4", "asynchzp z1=8 z2=4 z3=4 async", "asynchzp CP=4 PP=2 z1=4 z2=4 z3=4 async", "nd TP=2 × CP=2 × PP=2") and a configuration's label
(the layout, then every other swept key as `name=value`). The group sizes are resolved the way hzpbench
resolves them (0 = the next larger group; docs/options.md), so a run that left z2 at 0 and one that set it to
z1 get one label.
"""
from __future__ import annotations

import math
from typing import Any

# Scheduler keys the layout itself shows; other scheduler.* axes are appended as name=value.
LAYOUT_KEYS = {"scheduler.name", "scheduler.group_size", "scheduler.z1", "scheduler.z2", "scheduler.z3",
               "scheduler.async"}
# nd's mesh degrees its layout shows, innermost first (the mesh nests pp, dp, cp, tp), each where it is > 1; a
# results file always has them in its config (older files lack scheduler.cp: 1, as hzpbench defaults it).
ND_MESH = (("scheduler.tp", "TP"), ("scheduler.cp", "CP"), ("scheduler.pp", "PP"))
ND_LAYOUT_KEYS = {k for k, _ in ND_MESH}


def _int(v: Any, default: int = 0) -> int:
    try:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return default
        return int(v)
    except (TypeError, ValueError):
        return default


def groups(cfg: dict, world: int) -> tuple[int, int, int]:
    """(z1, z2, z3) of an asynchzp run: optimizer, gradient and parameter group sizes, zeros resolved (z1: all the
    ranks of a pipeline stage, world / pp)."""
    z1 = _int(cfg.get("scheduler.z1")) or world // max(1, _int(cfg.get("scheduler.pp"), 1))
    z2 = _int(cfg.get("scheduler.z2")) or z1
    z3 = _int(cfg.get("scheduler.z3")) or z2
    return z1, z2, z3


def hsdp_group(cfg: dict, world: int) -> int:
    return _int(cfg.get("scheduler.group_size")) or world


def truthy(v: Any) -> bool:
    return v is True or str(v).lower() in ("true", "1")


def layout(cfg: dict, world: int) -> str:
    name = str(cfg.get("scheduler.name", "?"))
    if name == "hsdp":
        return f"hsdp Z={hsdp_group(cfg, world)}"
    if name == "asynchzp":
        z1, z2, z3 = groups(cfg, world)
        mode = "async" if truthy(cfg.get("scheduler.async", True)) else "inline"
        mesh = "".join(f"{short}={_int(cfg.get(key), 1)} " for key, short in ND_MESH[1:] if _int(cfg.get(key), 1) > 1)
        return f"asynchzp {mesh}z1={z1} z2={z2} z3={z3} {mode}"
    if name == "nd":
        degree = mesh_degrees(cfg)
        mesh = [f"{short}={degree[short.lower()]}" for _, short in ND_MESH if degree[short.lower()] > 1]
        return "nd " + " × ".join(mesh) if mesh else "nd"
    return name


def mesh_degrees(cfg: dict) -> dict[str, int]:
    """nd's {"tp", "cp", "pp"} degrees from the configuration (1 where a key is absent: hzpbench's default)."""
    return {short.lower(): _int(cfg.get(key), 1) for key, short in ND_MESH}


def layout_keys(cfg: dict) -> set[str]:
    """The keys a configuration's layout shows (its label leaves them out of the name=value list)."""
    name = str(cfg.get("scheduler.name"))
    if name == "nd":
        return LAYOUT_KEYS | ND_LAYOUT_KEYS
    return LAYOUT_KEYS | {"scheduler.cp", "scheduler.pp"} if name == "asynchzp" else LAYOUT_KEYS


def plain(v: Any) -> Any:
    """A value as Python has it: numpy scalars unwrapped, NaN (pandas' missing) as None, so that two rows of
    one frame compare equal however pandas handed them out (.loc gives numpy scalars, iterrows objects)."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _short_names(keys: list[str]) -> dict[str, str]:
    """Last segment of each key, or the whole key where two keys share a last segment."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def value_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def config_label(cfg: dict, world: int, axes: list[str], show_world: bool, usual: dict | None = None) -> str:
    """The layout, the world size when runs differ in it, then every other axis as name=value. Without a
    sweep manifest the axes are every key that differs between files; then `usual` (axis -> the value most
    runs have) leaves out what a run shares with most others: two runs that differ still differ in label,
    since at least one of them departs from the usual value where they differ. output.* never names a run."""
    head = layout(cfg, world) + (f" W={world}" if show_world else "")
    shown = layout_keys(cfg)
    rest = [a for a in axes if a not in shown and a != "topology.world_size" and not a.startswith("output.")]
    short = _short_names(rest)
    usual = usual or {}
    parts = [f"{short[a]}={value_text(cfg.get(a))}" for a in rest
             if a in cfg and not (a in usual and repr(cfg.get(a)) == usual[a])]
    return ", ".join([head, *parts])
