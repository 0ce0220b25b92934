"""Slurm's side of a sweep, through its command-line clients: submitting a job array (sbatch), the live
state of array tasks (squeue), and the final state of finished ones (sacct where accounting exists, else
`scontrol show job` while the controller remembers the job, else the jobcomp/filetxt file: a private
Slurm without a database has only that, docs/environment.md "Single-node Slurm").

Array tasks are keyed (array job id, array index); the index is the task's index in the sweep.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

LIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING",
               "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}

Key = tuple[str, int]   # (array job id, array task index)


class SlurmError(Exception):
    pass


def _run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def available() -> bool:
    return shutil.which("sbatch") is not None and shutil.which("squeue") is not None


def require() -> None:
    if not available():
        raise SlurmError("sbatch/squeue not found: run this on a Slurm login node, start the private one "
                         "(scripts/local_slurm start, then eval $(scripts/local_slurm env)), or use `run-local`")


def array_spec(indices: list[int]) -> str:
    """--array value with runs compressed: [0,1,2,5,7,8] -> 0-2,5,7-8."""
    out, s = [], sorted(indices)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


def submit(script: Path, indices: list[int]) -> str:
    """sbatch --array; returns the array job id."""
    require()
    p = _run(["sbatch", "--parsable", f"--array={array_spec(indices)}", str(script)])
    if p.returncode != 0:
        raise SlurmError(f"sbatch {script.name} --array={array_spec(indices)} failed: {(p.stderr or p.stdout).strip()}")
    job = p.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise SlurmError(f"sbatch printed '{p.stdout.strip()}', not a job id")
    return job


def min_cpus_per_node(partition: str) -> int | None:
    """Fewest CPUs on a node of the partition (the default one when empty); None when Slurm cannot say."""
    if not available():
        return None
    cmd = ["sinfo", "-h", "-N", "-o", "%c"] + (["-p", partition] if partition else [])
    try:
        p = _run(cmd, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    vals = [int(x) for x in p.stdout.split() if x.strip().isdigit()]
    return min(vals) if p.returncode == 0 and vals else None


def live_states(job_ids: set[str]) -> dict[Key, str]:
    """Array tasks Slurm still holds (pending, running, ...): (job, index) -> state, reason."""
    if not job_ids or not available():
        return {}
    p = _run(["squeue", "-h", "-r", "-u", _user(), "-o", "%F|%K|%T|%r"])
    if p.returncode != 0:
        raise SlurmError(f"squeue failed: {(p.stderr or p.stdout).strip()}")
    out: dict[Key, str] = {}
    for line in p.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4 or parts[0] not in job_ids or not parts[1].isdigit():
            continue
        state, reason = parts[2], parts[3]
        out[(parts[0], int(parts[1]))] = state + (f" ({reason})" if reason and reason != "None" else "")
    return out


def final_states(job_ids: set[str]) -> dict[Key, dict]:
    """Finished array tasks: (job, index) -> {"state", "exit_code", "source"}; whatever sources answer."""
    out: dict[Key, dict] = {}
    if not job_ids or not available():
        return out
    for getter in (_from_sacct, _from_scontrol, _from_jobcomp):
        try:
            for k, v in getter(job_ids).items():
                out.setdefault(k, v)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            continue
    return out


def _user() -> str:
    import pwd
    return pwd.getpwuid(os.getuid()).pw_name


def _from_sacct(job_ids: set[str]) -> dict[Key, dict]:
    if shutil.which("sacct") is None:
        return {}
    p = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(sorted(job_ids)), "-o", "JobID,State,ExitCode"], timeout=30)
    if p.returncode != 0:   # no accounting storage: says so on stderr
        return {}
    out = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^(\d+)_(\d+)\|([A-Z_]+)[^|]*\|(\S+)$", line.strip())
        if m:
            out[(m.group(1), int(m.group(2)))] = {"state": m.group(3), "exit_code": m.group(4), "source": "sacct"}
    return out


def _fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S*)", line))


def _from_scontrol(job_ids: set[str]) -> dict[Key, dict]:
    out = {}
    for j in sorted(job_ids):
        p = _run(["scontrol", "-o", "show", "job", j], timeout=30)
        if p.returncode != 0:   # forgotten after MinJobAge
            continue
        for line in p.stdout.splitlines():
            f = _fields(line)
            if f.get("ArrayJobId") == j and f.get("ArrayTaskId", "").isdigit() and f.get("JobState") not in LIVE_STATES:
                out[(j, int(f["ArrayTaskId"]))] = {"state": f.get("JobState", "?"), "exit_code": f.get("ExitCode", "?"),
                                                   "source": "scontrol"}
    return out


def _jobcomp_file() -> Path | None:
    p = _run(["scontrol", "show", "config"], timeout=30)
    if p.returncode != 0:
        return None
    conf = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", p.stdout, re.M))
    if conf.get("JobCompType") != "jobcomp/filetxt" or not conf.get("JobCompLoc"):
        return None
    f = Path(conf["JobCompLoc"])
    return f if f.is_file() else None


def _from_jobcomp(job_ids: set[str]) -> dict[Key, dict]:
    f = _jobcomp_file()
    if f is None:
        return {}
    out = {}
    for line in f.read_text(errors="replace").splitlines():
        d = _fields(line)
        j, i = d.get("ArrayJobId"), d.get("ArrayTaskId", "")
        if j in job_ids and i.isdigit():
            out[(j, int(i))] = {"state": d.get("JobState", "?"), "exit_code": d.get("ExitCode", "?"), "source": "jobcomp"}
    return out


def cancel(job: str, index: int | None = None) -> None:
    target = job if index is None else f"{job}_{index}"
    p = _run(["scancel", target])
    if p.returncode != 0:
        raise SlurmError(f"scancel {target} failed: {(p.stderr or p.stdout).strip()}")
