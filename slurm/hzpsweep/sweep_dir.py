"""A sweep's folder, results/<sweep>/: what the tool writes there and reads back.

    sweep.json          the manifest: spec, tasks (index = Slurm array index), job scripts, every attempt
    tasks.txt           task names, line i+1 = array index i (what a job script reads)
    configs/<task>.toml one resolved configuration per task
    job-<N>n-<R>r.sbatch one job-array script per (nodes, ranks per node) shape
    <task>.h5, <task>.log   results file and log of the task's latest attempt
    slurm/              Slurm's own output per array task (%A_%a.out)
    checkpoints/<task>/ the task's checkpoints (checkpoints.py), which a requeued or resubmitted task resumes
    superseded/         files of earlier attempts, moved aside by resubmit or a resume (never deleted)

The manifest is rewritten whole and renamed into place, so a reader never sees half of it.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
from pathlib import Path

from . import checkpoints, toml_out
from .spec import Sweep, Task

MANIFEST = "sweep.json"
FORMAT = 1


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def script_name(shape: tuple[int, int]) -> str:
    return f"job-{shape[0]}n-{shape[1]}r.sbatch"


def config_path(d: Path, task: str) -> Path:
    return d / "configs" / f"{task}.toml"


def result_path(d: Path, task: str) -> Path:
    return d / f"{task}.h5"


def log_path(d: Path, task: str) -> Path:
    return d / f"{task}.log"


def write_configs(sweep: Sweep, d: Path) -> list[Path]:
    """One config file per distinct task configuration (repeats share theirs by name)."""
    (d / "configs").mkdir(parents=True, exist_ok=True)
    out = []
    for t in sweep.tasks:
        p = config_path(d, t.name)
        axes = ", ".join(f"{k} = {toml_out.value(v)}" for k, v in t.values.items()) or "(no axes)"
        p.write_text(toml_out.dumps(t.config, f"Sweep {sweep.name}, task {t.index} '{t.name}' (repeat {t.repeat}): "
                                               f"{axes}.\nWritten by slurm/sweep from {sweep.spec_path}."))
        out.append(p)
    return out


def new_manifest(sweep: Sweep, program: str, job_env: dict[str, str]) -> dict:
    return {
        "format": FORMAT,
        "name": sweep.name,
        "spec": str(sweep.spec_path),
        "spec_sha256": sweep.spec_sha256,
        "created": now(),
        "hzpbench": program,
        "axes": list(sweep.axes),
        "time_per_task_s": sweep.time_per_task_s,
        "job_env": job_env,     # what every rank gets (the job scripts export the same)
        "tasks": [task_record(t) for t in sweep.tasks],
        "scripts": {},          # "NxR" -> script file name
        "attempts": [],         # in order; the latest attempt naming a task is the one that counts
    }


def task_record(t: Task) -> dict:
    return {"index": t.index, "name": t.name, "repeat": t.repeat, "values": t.values, "nodes": t.nodes,
            "ranks_per_node": t.ranks_per_node, "world_size": t.world_size}


def write_manifest(d: Path, m: dict) -> None:
    tmp = d / f".{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(m, indent=1) + "\n")
    os.replace(tmp, d / MANIFEST)


def read_manifest(d: Path) -> dict:
    p = d / MANIFEST
    if not p.is_file():
        raise FileNotFoundError(f"'{d}' holds no {MANIFEST}: it is not a sweep folder made by `slurm/sweep submit` "
                                "or `run-local` (give the folder results/<sweep> or the spec file)")
    m = json.loads(p.read_text())
    if m.get("format") != FORMAT:
        raise ValueError(f"'{p}' has format {m.get('format')!r}; this tool reads format {FORMAT}")
    return m


def write_task_list(sweep: Sweep, d: Path) -> None:
    (d / "tasks.txt").write_text("".join(t.name + "\n" for t in sweep.tasks))


def slurm_attempt(job_id: str, indices: list[int], script: str) -> dict:
    return {"kind": "slurm", "job_id": job_id, "indices": indices, "script": script, "time": now()}


def local_attempt(indices: list[int]) -> dict:
    return {"kind": "local", "indices": indices, "time": now(), "host": socket.gethostname(), "pid": os.getpid(),
            "results": {}}     # task name -> {"exit_code", "start", "end", "timed_out"}


def latest_attempts(m: dict) -> dict[int, dict]:
    """Task index -> the latest attempt that named it."""
    out: dict[int, dict] = {}
    for a in m["attempts"]:
        for i in a["indices"]:
            out[i] = a
    return out


def supersede(d: Path, task: str, restart: bool = False) -> list[str]:
    """Moves the task's results file and log aside before a new attempt; with `restart` also its checkpoints, so the
    attempt starts from step 0 instead of resuming (job scripts resume from whatever checkpoints/<task>/ holds).
    Returns what moved where."""
    moved = []
    sup = d / "superseded"
    ckpts = checkpoints.task_dir(d, task)
    # attempt<n>.checkpoints is the folder's name there (the job script numbers attempts the same way).
    srcs = {".h5": result_path(d, task), ".log": log_path(d, task), ".checkpoints": ckpts}
    if not restart:
        del srcs[".checkpoints"]
    srcs = {k: p for k, p in srcs.items() if p.exists()}
    if not srcs:
        return moved
    sup.mkdir(exist_ok=True)
    n = 1
    while any((sup / f"{task}.attempt{n}{suffix}").exists() for suffix in (".h5", ".log", ".checkpoints")):
        n += 1
    for suffix, src in srcs.items():
        dst = sup / f"{task}.attempt{n}{suffix}"
        os.replace(src, dst)
        moved.append(f"{src.relative_to(d)} -> superseded/{dst.name}")
    return moved
