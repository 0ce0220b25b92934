"""A sweep's plan: every task validated with `hzpbench validate` at its world size, the job arrays by task
shape with their --overcommit decisions, and the printed summary `plan`/`--dry-run` shows.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import tempfile
from pathlib import Path

from . import hzpbench, slurm_client, sweep_dir, toml_out
from .spec import Sweep, slurm_time


class PlanError(Exception):
    pass


@dataclasses.dataclass
class ShapeGroup:
    shape: tuple[int, int]          # (nodes, ranks per node)
    indices: list[int]
    overcommit: bool
    why: str                        # one line: how overcommit was decided


def validate_all(sweep: Sweep, program: str, jobs: int | None = None) -> int:
    """Validates each distinct (configuration, ranks per node) once; raises PlanError listing every distinct
    refusal with the tasks it hit. Returns the number of distinct configurations checked."""
    with tempfile.TemporaryDirectory(prefix="hzpsweep-validate-") as tmp:
        files = sweep_dir.write_configs(sweep, Path(tmp))
        distinct: dict[tuple[str, int], tuple[Path, dict, list[str]]] = {}
        for t, f in zip(sweep.tasks, files):
            key = (toml_out.dumps(t.config), t.ranks_per_node)
            distinct.setdefault(key, (f, t.config, []))[2].append(t.name)

        # Node-dependent checks (a group inside a node) need the allocation's layout unless the config names one.
        def check(item):
            (_, rpn), (f, config, names) = item
            layout = None if "topology.ranks_per_node" in config else rpn
            ok, out = hzpbench.validate(program, f, layout)
            # The same refusal of several tasks differs only in the file name: say it once for all.
            return names, (ok, out.replace(str(f), "configs/<task>.toml"))

        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs or min(8, os.cpu_count() or 2)) as ex:
            results = list(ex.map(check, distinct.items()))
    refusals: dict[str, list[str]] = {}
    for names, (ok, out) in results:
        if not ok:
            msg = " ".join(l.strip() for l in out.splitlines() if l.strip()) or "(no message)"
            refusals.setdefault(msg, []).extend(names)
    if refusals:
        msgs = [f"hzpbench validate refused {len(n)} task(s) (e.g. '{n[0]}'): {m}" for m, n in refusals.items()]
        raise PlanError("\n".join(msgs))
    return len(distinct)


def shape_groups(sweep: Sweep, query_slurm: bool) -> list[ShapeGroup]:
    shapes: dict[tuple[int, int], list[int]] = {}
    for t in sweep.tasks:
        shapes.setdefault(t.shape, []).append(t.index)
    cpus = slurm_client.min_cpus_per_node(sweep.partition) if query_slurm and sweep.overcommit == "auto" else None
    out = []
    for shape, idx in shapes.items():
        need = shape[1] * sweep.cpus_per_task
        if sweep.overcommit != "auto":
            oc, why = sweep.overcommit == "true", f"sweep.overcommit = {sweep.overcommit}"
        elif cpus is None:
            oc, why = False, "no Slurm to ask for CPUs per node: no --overcommit (set sweep.overcommit to decide)"
        else:
            oc = need > cpus
            why = (f"{need} CPUs per node needed, {cpus} on the smallest node: "
                   + ("--overcommit, or Slurm would keep the job pending forever" if oc else "no --overcommit"))
        out.append(ShapeGroup(shape, idx, oc, why))
    return out


def _show(v) -> str:
    return v if isinstance(v, str) else toml_out.value(v)


def describe(sweep: Sweep, groups: list[ShapeGroup], validated: int | None, program: str) -> str:
    n = len(sweep.tasks)
    configs = n // sweep.repeats
    lines = [f"sweep {sweep.name}: {n} task(s) = {configs} configuration(s) x {sweep.repeats} repeat(s)"
             f"{f', {sweep.excluded} combination(s) excluded' if sweep.excluded else ''}; results in {sweep.sweep_dir}/"]
    if sweep.axes:
        lines.append("  axes       " + ", ".join(f"{k} ({len(v)}: {', '.join(_show(x) for x in v)})"
                                                  for k, v in sweep.axes.items()))
    ranks = sum(t.world_size for t in sweep.tasks)
    lines.append(f"  ranks      {ranks} in all; {sweep.gpus_per_node} GPU(s) per node, {sweep.cpus_per_task} CPU(s) per rank, "
                 f"launcher {sweep.launcher}")
    if sweep.time_per_task_s:
        nh = sum(t.nodes for t in sweep.tasks) * sweep.time_per_task_s / 3600
        lines.append(f"  time       {slurm_time(sweep.time_per_task_s)} per task: at most {nh:.2f} node-hours")
    else:
        lines.append("  time       no sweep.time_per_task: the partition's limit applies; node-hours not estimated")
    for g in groups:
        lines.append(f"  job array  {sweep_dir.script_name(g.shape)}: {g.shape[0]} node(s) x {g.shape[1]} rank(s), "
                     f"{len(g.indices)} task(s), --array={slurm_client.array_spec(g.indices)}; {g.why}")
    if validated is not None:
        lines.append(f"  validated  {validated} distinct configuration(s) with {program} validate")
    keys = list(sweep.axes)
    width = max(len(t.name) for t in sweep.tasks)
    lines.append(f"  {'#':>4}  {'task':<{width}}  nodes  ranks  " + "  ".join(keys))
    for t in sweep.tasks:
        vals = "  ".join(f"{_show(t.values[k]):<{len(k)}}" for k in keys)
        lines.append(f"  {t.index:>4}  {t.name:<{width}}  {t.nodes:>5}  {t.ranks_per_node:>5}  {vals}".rstrip())
    return "\n".join(lines)
