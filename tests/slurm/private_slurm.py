"""What the `slurm` tests share: checks that print as they pass, subprocess helpers, `slurm/sweep status` as a
dict, a live results file's flushed steps, and a private single-node Slurm (scripts/local_slurm) started for one
test and stopped after it, with the skip rule: exit 77 (a visible CTest skip) only when the Slurm binaries are
missing or we are not root and the environment variable CI is unset; in CI that fails.
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SWEEP = [sys.executable, str(REPO / "slurm" / "sweep")]
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol")


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print(f"ok: {msg}", flush=True)


def have(b):
    return shutil.which(b) or os.access(f"/usr/sbin/{b}", os.X_OK)


def sh(cmd, env, timeout=120, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, **kw)
    return p.returncode, p.stdout, p.stderr


def statuses(sweep_dir, env):
    rc, out, err = sh(SWEEP + ["status", str(sweep_dir), "--json"], env)
    if rc not in (0, 1):
        fail(f"slurm/sweep status exited {rc}: {err}")
    return {r["name"]: r for r in json.loads(out)}


def flushed_steps(path):
    """Rows of steps/loss in a live run's file (h5py without the lock: cheaper than a process per poll)."""
    import h5py
    try:
        with h5py.File(path, "r", locking=False) as f:
            return f["steps/loss"].shape[0] if "steps/loss" in f else 0
    except (OSError, KeyError, RuntimeError):
        # The writer may be mid-flush: h5py then sees metadata past the end of what is on disk ("addr
        # overflow", a RuntimeError) — not an error of the run, just a read too early. Poll again.
        return -1


def wait_for_steps(path, n, timeout, what):
    deadline = time.time() + timeout
    while flushed_steps(path) < n:
        if time.time() > deadline:
            fail(f"{what}: {path.name} flushed fewer than {n} steps within {timeout} s")
        time.sleep(0.02)


def run_slurm_test(doc, body):
    """A `slurm` test's entry point: argv HZPBENCH WORKDIR (else usage `doc`), the skip rule, a fresh WORKDIR, then
    body(hzpbench, work, env, slurm_dir) under a private Slurm; PASS when it returns."""
    if len(sys.argv) != 3:
        sys.exit(doc)
    hzpbench, work = sys.argv[1], Path(sys.argv[2])
    skip_unless_available()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with private_slurm() as (env, slurm_dir):
        body(hzpbench, work, env, slurm_dir)
    print("PASS")


def skip_unless_available():
    missing = [b for b in BINARIES if not have(b)]
    if missing or os.geteuid() != 0:
        why = f"Slurm binaries missing: {', '.join(missing)}" if missing else "not root (a private Slurm needs SlurmUser=root)"
        if os.environ.get("CI"):
            fail(f"{why}; in CI scripts/bootstrap must install slurm-wlm and munge")
        print(f"SKIP: {why}; install slurm-wlm and munge (scripts/bootstrap) to run this test")
        sys.exit(77)


@contextlib.contextmanager
def private_slurm():
    """Starts a private Slurm in a fresh folder, yields the environment that reaches it, stops it afterwards."""
    # A short private folder: the munge socket path must stay under the Unix socket limit.
    slurm_dir = Path(tempfile.mkdtemp(prefix="hzp-slurm-", dir="/tmp"))
    env = dict(os.environ, SLURM_CONF=str(slurm_dir / "slurm.conf"), OPENBLAS_NUM_THREADS="1")
    try:
        t0 = time.time()
        rc, out, err = sh([str(REPO / "scripts" / "local_slurm"), "start", str(slurm_dir)], env, timeout=90)
        check(rc == 0, f"private Slurm started in {time.time() - t0:.1f} s ({(out + err).strip()})")
        yield env, slurm_dir
    finally:
        rc, out, err = sh([str(REPO / "scripts" / "local_slurm"), "stop", str(slurm_dir)], env, timeout=90)
        print((out + err).strip())
        rc2, _, _ = sh([str(REPO / "scripts" / "local_slurm"), "status", str(slurm_dir)], env)
        if rc != 0 or rc2 == 0:
            print(f"FAIL: local_slurm stop did not stop the daemons (logs in {slurm_dir}/log)")
            sys.exit(1)
        shutil.rmtree(slurm_dir, ignore_errors=True)
