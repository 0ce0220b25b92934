"""The hzpbench program as the sweep tool uses it: finding it, `validate` for a task's configuration and
world size, and `inspect --json` for a results file (the harness's own reader, which opens files
without HDF5's lock, so a live run's file can be read)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def default_program() -> str:
    built = REPO / "build" / "bin" / "hzpbench"
    if built.is_file():
        return str(built)
    return shutil.which("hzpbench") or ""


def check_program(path: str) -> str:
    """The program's absolute path, or one line saying how to get one."""
    if not path:
        raise FileNotFoundError("hzpbench not found: build it (scripts/build puts it at build/bin/hzpbench), "
                                "put it on PATH, or set sweep.hzpbench / --hzpbench")
    p = Path(path)
    if not p.is_file() or not os.access(p, os.X_OK):
        raise FileNotFoundError(f"hzpbench '{path}' is not an executable file; build it (scripts/build) or fix "
                                "sweep.hzpbench / --hzpbench")
    return str(p.resolve())


def validate(program: str, config_file: Path, ranks_per_node: int | None) -> tuple[bool, str]:
    """`hzpbench validate` of one config file (it sets topology.world_size). Returns (valid, output).
    ranks_per_node, when given, lays the ranks out as the allocation will (node-dependent checks)."""
    cmd = [program, "validate", "--config", str(config_file)]
    if ranks_per_node is not None:
        cmd += ["--set", f"topology.ranks_per_node={ranks_per_node}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}  # validate uses its config, not Slurm
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    return p.returncode == 0, (p.stdout + p.stderr).strip()


def inspect(program: str, path: Path) -> dict:
    """`hzpbench inspect --json FILE` as a dict; {"error": message} when the file cannot be read."""
    p = subprocess.run([program, "inspect", "--json", str(path)], capture_output=True, text=True, timeout=60)
    if p.returncode == 0:
        try:
            return json.loads(p.stdout)
        except json.JSONDecodeError as e:
            return {"error": f"hzpbench inspect --json printed no JSON ({e})"}
    lines = [l for l in (p.stderr + p.stdout).strip().splitlines() if l.strip()]
    return {"error": lines[-1] if lines else f"hzpbench inspect exited {p.returncode}"}
