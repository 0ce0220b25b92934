"""A task's checkpoints in its sweep folder: checkpoints/<task>/<task>.step<n>.ckpt.h5, as hzpbench names them
(docs/checkpoints.md; n counts steps from 1). The newest complete one is what a requeued or resubmitted task
resumes from; the job script (batch_script.py) finds it the same way in bash, since it runs without this tool.
"""
from __future__ import annotations

import re
from pathlib import Path

FOLDER = "checkpoints"


def task_dir(d: Path, task: str) -> Path:
    return d / FOLDER / task


def latest(d: Path, task: str) -> tuple[Path, int] | None:
    """The task's newest complete checkpoint and its step (counted from 1), or None. A checkpoint being written is
    `<name>.partial` until it is whole, so it never matches."""
    folder = task_dir(d, task)
    if not folder.is_dir():
        return None
    name = re.compile(re.escape(task) + r"\.step(\d+)\.ckpt\.h5")
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := name.fullmatch(p.name))]
    if not found:
        return None
    step, path = max(found)
    return path, step


def resume_args(d: Path, task: str) -> list[str]:
    """hzpbench run's arguments for the task's checkpoints: their folder, and --resume of the newest one."""
    folder = task_dir(d, task)
    folder.mkdir(parents=True, exist_ok=True)
    args = ["--set", f"output.checkpoint_dir={folder}"]
    last = latest(d, task)
    return args + (["--resume", str(last[0])] if last else [])
