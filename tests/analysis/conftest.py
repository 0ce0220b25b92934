"""Results files for the analysis tests, written by the real hzpbench (HZPBENCH, set by CTest): finished,
diverged, failed and killed runs at one rank, a ddp run at two, and broken copies made from them; for the
figures and the report, a sweep folder of those plus zero3 and asynchzp runs at two ranks on emulated links
(two sequence lengths, two micro-batch counts, two asynchzp layouts, async on and off)."""
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


# The figures' extra runs: 2 ranks as 2 virtual nodes of 1, links at comm_to_compute r (name, ranks, keys).
LINKS = ["--set", "topology.ranks_per_node=1", "--set", "links.emulate=true"]
SWEEP_EXTRA = [
    ("zero3", ["--set", "scheduler.name=zero3", "--set", "links.comm_to_compute=0.5"]),
    ("zero3_seq128", ["--set", "scheduler.name=zero3", "--set", "links.comm_to_compute=0.5",
                      "--set", "model.seq_len=128"]),
    ("zero3_batch32", ["--set", "scheduler.name=zero3", "--set", "links.comm_to_compute=0.5",
                       "--set", "train.global_batch=32"]),
    ("asynchzp_async", ["--set", "scheduler.name=asynchzp", "--set", "scheduler.z3=1",
                        "--set", "links.comm_to_compute=0.5"]),
    ("asynchzp_inline", ["--set", "scheduler.name=asynchzp", "--set", "scheduler.z2=1", "--set", "scheduler.async=false",
                         "--set", "links.comm_to_compute=2"]),
]


@pytest.fixture(scope="session")
def sweep(runs, tmp_path_factory) -> Path:
    """One folder as a sweep without a manifest: the runs above (one failed, one killed, one diverged) and
    the extra multi-rank runs the figures need."""
    d = tmp_path_factory.mktemp("figures_sweep")
    for name, src in runs.items():
        shutil.copy(src, d / f"{name}.h5")
    for name, extra in SWEEP_EXTRA:
        run(d / f"{name}.h5", *LINKS, *extra, ranks=2)
    return d
