#!/usr/bin/env python3
"""SIGKILL a results writer at random moments; every file it leaves must open and hold its steps.

Runs results_writer_victim (one step every 20 ms, flushed, "completed N" printed after each flush)
KILLS times, killing it at a random moment in one of KILLS equal slices of --window seconds after the
file was created, so early and late kills are both covered. Each file must open with h5py, read
status == "running", hold at least (last printed completed steps - 1) rows in every growing series with
the exact values the victim wrote, and `hzpbench inspect` must summarise it with the killed hint.
Exit 77 (a visible CTest skip) when h5py/numpy are missing: scripts/bootstrap installs them.

usage: killed_writer_test.py VICTIM HZPBENCH WORKDIR [--kills 5] [--window 0.6] [--seed S]
"""
import argparse
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time

try:
    import h5py
    import numpy as np
except ImportError as e:  # a skip, not a pass: CTest shows it
    print(f"SKIP: {e}; run scripts/bootstrap to install h5py and numpy for {sys.executable}")
    sys.exit(77)

GROWING = ["steps/loss", "steps/lr", "steps/step_time_s", "ranks/step_time_s",
           "comm/all_gather/intra/count", "comm/all_gather/intra/bytes"]


def run_and_kill(victim, path, delay_s):
    """Starts the victim, kills it delay_s after it reported the file created; returns last printed N."""
    proc = subprocess.Popen([victim, path, "--interval-ms", "20"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1)
    state = {"created": threading.Event(), "completed": 0}

    def read():
        for line in proc.stdout:
            if line.startswith("created"):
                state["created"].set()
            elif line.startswith("completed "):
                state["completed"] = int(line.split()[1])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not state["created"].wait(timeout=20):
        proc.kill()
        raise AssertionError(f"victim did not create {path}: {proc.stderr.read()}")
    time.sleep(delay_s)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(timeout=10)
    assert proc.returncode == -signal.SIGKILL, f"victim ended with {proc.returncode}, not by SIGKILL"
    return state["completed"]


def check_file(path, printed):
    with h5py.File(path, "r") as f:
        status = f.attrs["status"]
        assert status == "running", f"{path}: status {status!r}, expected 'running'"
        assert f.attrs["end_time"] == "", f"{path}: end_time set on a killed run"
        assert f.attrs["schema_version"] == 2
        rows = {name: f[name].shape[0] for name in GROWING}
        held = min(rows.values())
        assert held >= printed - 1, f"{path}: printed {printed} completed steps but the file holds {rows}"
        # A step is flushed before it is printed, so the file can be at most one step ahead.
        assert held <= printed + 1, f"{path}: file holds {rows} but only {printed} steps were printed"
        n = held
        loss = f["steps/loss"][:n]
        expect = np.array([5.0 * math.exp(-0.01 * s) for s in range(n)])
        assert np.array_equal(loss, expect), f"{path}: steps/loss differs from what was written"
        rt = f["ranks/step_time_s"][:n]
        assert rt.shape == (n, 2)
        expect_rt = np.array([[0.02 + 0.001 * ((s + r) % 3) for r in range(2)] for s in range(n)])
        assert np.array_equal(rt, expect_rt), f"{path}: ranks/step_time_s differs"
        b = f["comm/all_gather/intra/bytes"][:n]
        assert np.array_equal(b, np.array([[4096 * (s + 1)] * 2 for s in range(n)])), f"{path}: bytes differ"
        assert f["steps/loss"].attrs["units"] == "nats/token"
        assert list(f["memory/model_state_bytes"].attrs["components"]) == ["param", "grad", "master", "m", "v"]
        return held, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("victim")
    ap.add_argument("hzpbench")
    ap.add_argument("workdir")
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--window", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    os.makedirs(a.workdir, exist_ok=True)
    print(f"seed {seed} (rerun with --seed {seed})")
    failures = 0
    for i in range(a.kills):
        slice_s = a.window / a.kills
        delay = rng.uniform(i * slice_s, (i + 1) * slice_s)
        path = os.path.join(a.workdir, f"killed_{i}.h5")
        if os.path.exists(path):
            os.remove(path)
        printed = run_and_kill(a.victim, path, delay)
        try:
            held, rows = check_file(path, printed)
            out = subprocess.run([a.hzpbench, "inspect", path], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, f"hzpbench inspect {path} exited {out.returncode}: {out.stderr}"
            assert "killed?" in out.stdout and f"after step {held}" in out.stdout, \
                f"inspect output lacks the killed hint for step {held}:\n{out.stdout}"
            print(f"kill {i + 1}: at {delay * 1000:6.1f} ms after creation: printed {printed} completed steps, "
                  f"file holds {held} (rows per series {sorted(set(rows.values()))}), status running: OK")
        except AssertionError as e:
            failures += 1
            print(f"kill {i + 1}: at {delay * 1000:6.1f} ms: FAILED: {e}")
    if failures:
        print(f"{failures} of {a.kills} killed files failed (seed {seed})")
        return 1
    print(f"all {a.kills} killed files open with status running and every printed step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
