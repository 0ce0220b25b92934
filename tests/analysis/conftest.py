"""Results files for the collect tests, written by the real hzpbench (HZPBENCH, set by CTest): finished,
diverged, failed and killed runs at one rank, a ddp run at two, and broken copies made from them."""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TINY = ["--set", "model.preset=tiny", "--set", "train.steps=8", "--set", "train.warmup_steps=1",
        "--set", "harness.warmup_steps=2"]


def hzpbench() -> str:
    p = os.environ.get("HZPBENCH") or str(REPO / "build" / "bin" / "hzpbench")
    if not Path(p).is_file():
        pytest.fail(f"hzpbench not found at {p}: build it (scripts/build) or set HZPBENCH")
    return p


def run(out: Path, *extra: str, ranks: int = 1, expect: int = 0) -> Path:
    cmd = [hzpbench(), "run", *TINY, *extra, "--out", str(out)]
    if ranks > 1:
        cmd = [shutil.which("mpiexec") or "mpiexec", "-n", str(ranks)] + cmd
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == expect, f"{' '.join(cmd)} exited {p.returncode}, expected {expect}:\n{p.stdout}\n{p.stderr}"
    return out


def run_and_kill(out: Path) -> Path:
    """A long run SIGKILLed once it has flushed a few steps: its file stays at status running."""
    cmd = [hzpbench(), "run", *TINY, "--set", "train.steps=100000", "--set", "output.flush_s=0", "--out", str(out)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    deadline = time.time() + 60
    try:
        while time.time() < deadline:
            time.sleep(0.1)
            if out.exists():
                try:
                    with h5py.File(out, "r", locking=False) as f:
                        if "steps/loss" in f and f["steps/loss"].shape[0] >= 4:
                            break
                except OSError:
                    pass
        else:
            pytest.fail("the run to be killed flushed no 4 steps within 60 s")
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    return out


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("sweep")
    files = {
        "ok": run(d / "ok.h5"),
        "diverged": run(d / "diverged.h5", "--set", "debug.nan_at=4", expect=3),
        "failed": run(d / "failed.h5", "--set", "debug.throw_at=0:3", expect=4),
        "killed": run_and_kill(d / "killed.h5"),
        "ddp": run(d / "ddp.h5", "--set", "scheduler.name=ddp", ranks=2),
    }
    return files
