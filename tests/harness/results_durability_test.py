#!/usr/bin/env python3
"""Nothing measured is lost: `hzpbench run` against the faults that used to destroy results files.

Scenarios (one CTest each, see run_tests.cmake):
  force_live     a second run with --force on the file of a live run is refused before it touches the file:
                 the live run ends ok and its file opens with every step (the old create truncated it first)
  force_failing  --force over an ok file by a run that fails before its first step keeps the old file as it
                 was (the failed run stays beside it, marked failed); a run that starts replaces it
  disk_full      --out on a 2 MB tmpfs that fills: the run stops at once with one message, exit 4, no crash,
                 and the file opens, marked failed, with the steps flushed before (skips without mount rights)
  displaced      the file replaced under a live run: the run stops, its bytes are saved beside the path,
                 marked failed, holding every step flushed before
  sigterm        SIGTERM to the job (to mpiexec at W > 1): exit 143 within 10 s, status `failed: <rank>:
                 terminated by SIGTERM`, every step printed before the signal in the file
  sigint         the same for SIGINT: exit 130 (no longer 2, the bad-input code)
  short_file     inspect of a file cut after its HDF5 superblock says damaged/truncated, never "locked"
  default_names  two runs started together without --out both succeed, in two files

usage: results_durability_test.py SCENARIO --hzpbench PATH --mpiexec PATH --ranks N --workdir DIR
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_e2e_test as e2e  # noqa: E402  (h5py/numpy import and the skip live there)
from run_e2e_test import attr, check  # noqa: E402

import h5py  # noqa: E402

TINY = ["--set", "model.preset=tiny", "--set", "train.warmup_steps=1"]


def launch(extra, out, ranks=None):
    """Starts hzpbench run in the background; returns (process, list of (time, step) printed, reader thread)."""
    ranks = e2e.ARGS.ranks if ranks is None else ranks
    cmd = [e2e.ARGS.hzpbench, "run", "--out", out] + extra
    if ranks > 1:
        cmd = [e2e.ARGS.mpiexec, "-n", str(ranks)] + cmd
    print(f"$ {' '.join(cmd)} &")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed, err = [], []

    def read_out():
        for line in proc.stdout:
            if line.startswith("step "):
                printed.append((time.monotonic(), int(line.split()[1].split("/")[0])))

    def read_err():
        err.extend(proc.stderr)

    threads = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in threads:
        t.start()
    return proc, printed, err, threads


def wait_for_step(printed, proc, step, timeout=120):
    t0 = time.monotonic()
    while not printed or printed[-1][1] < step:
        check(proc.poll() is None, f"the run ended (exit {proc.returncode}) before step {step}")
        check(time.monotonic() - t0 < timeout, f"no step {step} within {timeout} s")
        time.sleep(0.02)


def finish(proc, threads, timeout=120):
    proc.wait(timeout=timeout)
    for t in threads:
        t.join(timeout=10)
    return proc.returncode


def rows(path):
    with h5py.File(path, "r", locking=False) as f:
        names = ["steps/loss", "ranks/step_time_s"]
        return attr(f, "status"), min(f[n].shape[0] if n in f else 0 for n in names)


# ---------------------------------------------------------------------------------------------------------

def scenario_force_live():
    path = os.path.join(e2e.ARGS.workdir, "live.h5")
    steps = 40 if e2e.ARGS.ranks == 1 else 16
    proc, printed, err, threads = launch(TINY + ["--set", f"train.steps={steps}"], path)
    wait_for_step(printed, proc, 2)
    rc, out, err2, _ = e2e.run(TINY + ["--set", "train.steps=2", "--force"], ranks=1, out=path)
    check(rc == 2, f"--force on a live file: exit {rc}, expected 2 (refused)\n{err2}")
    check("has it open" in err2 and "nothing was changed" in err2, f"the refusal names no live writer:\n{err2}")
    rc = finish(proc, threads)
    check(rc == 0, f"the live run ended with {rc}:\n{''.join(err)}")
    status, n = rows(path)
    print(f"  live run: status {status}, {n} steps in its file")
    check(status == "ok" and n == steps, f"the live run's file: status {status}, {n} of {steps} steps")
    check(not [p for p in os.listdir(e2e.ARGS.workdir) if ".partial-" in p], "the refused run left a file behind")


def scenario_force_failing():
    path = os.path.join(e2e.ARGS.workdir, "old.h5")
    e2e.run(TINY + ["--set", "train.steps=3"], ranks=e2e.ARGS.ranks, out=path, expect_rc=0)
    before = open(path, "rb").read()
    rc, _, err, _ = e2e.run(TINY + ["--set", "train.steps=5", "--force", "--set", "debug.throw_at=0:0"],
                            ranks=e2e.ARGS.ranks, out=path)
    check(rc == 4, f"the failing run ended with {rc}, expected 4")
    check(open(path, "rb").read() == before, "the old results file changed although the new run never started")
    partial = [p for p in os.listdir(e2e.ARGS.workdir) if p.startswith("old.h5.partial-")]
    check(len(partial) == 1, f"expected the failed run's file beside the old one, found {partial}")
    check("is kept unchanged" in err, f"the failure does not say the old file was kept:\n{err}")
    status, n = rows(os.path.join(e2e.ARGS.workdir, partial[0]))
    check(status.startswith("failed: 0: debug.throw_at"), f"the failed run's file says {status!r}")
    # A run that starts takes the file's place, and nothing of it is left under its temporary name.
    e2e.run(TINY + ["--set", "train.steps=4", "--force"], ranks=e2e.ARGS.ranks, out=path, expect_rc=0)
    status, n = rows(path)
    check(status == "ok" and n == 4, f"the replacing run's file: {status}, {n} steps")
    left = [p for p in os.listdir(e2e.ARGS.workdir) if p.startswith("old.h5.")]
    check(left == partial, f"files beside the results: {left}")


def scenario_disk_full():
    mnt = tempfile.mkdtemp(dir=e2e.ARGS.workdir, prefix="tmpfs-")
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt], capture_output=True, text=True)
    if m.returncode != 0:
        print(f"SKIP: cannot mount a tmpfs here ({m.stderr.strip()}); this scenario needs mount rights")
        sys.exit(77)
    try:
        # Filled to a third, so the disk runs out within the first steps.
        with open(os.path.join(mnt, "filler"), "wb") as f:
            f.write(b"\0" * 700_000)
        path = os.path.join(mnt, "run.h5")
        t0 = time.monotonic()
        rc, out, err, _ = e2e.run(TINY + ["--set", "train.steps=5000", "--set", "output.flush_s=0"],
                                  ranks=e2e.ARGS.ranks, out=path, timeout=60)
        took = time.monotonic() - t0
        check(rc == 4, f"exit {rc} (a crash is negative), expected 4:\n{err[-3000:]}")
        check(took < 20, f"the run took {took:.1f} s to stop after the disk filled")
        check(err.count("hzpbench: failed:") == 1 and "is full" in err, f"not one message naming the full disk:\n{err}")
        check("Segmentation" not in err and "could not mark" not in err, f"not a clean stop:\n{err}")
        status, n = rows(path)
        printed = [int(l.split()[1].split("/")[0]) for l in out.splitlines() if l.startswith("step ")]
        print(f"  stopped after {took:.1f} s: status {status[:60]}..., {n} steps in the file, {len(printed)} printed")
        check(status.startswith("failed: 0: the file system holding"), f"status {status!r}")
        check(n >= 1 and n >= len(printed), f"the file holds {n} steps, {len(printed)} were printed")
        insp = subprocess.run([e2e.ARGS.hzpbench, "inspect", path], capture_output=True, text=True)
        check(insp.returncode == 0, f"inspect cannot read the file:\n{insp.stdout}{insp.stderr}")
    finally:
        subprocess.run(["umount", "-l", mnt])


def scenario_displaced():
    path = os.path.join(e2e.ARGS.workdir, "moved.h5")
    proc, printed, err, threads = launch(TINY + ["--set", "train.steps=2000", "--set", "output.flush_s=0"], path)
    wait_for_step(printed, proc, 3)
    seen = printed[-1][1]
    other = os.path.join(e2e.ARGS.workdir, "other")
    with open(other, "w") as f:
        f.write("someone else's file\n")
    os.replace(other, path)
    rc = finish(proc, threads, timeout=60)
    text = "".join(err)
    check(rc == 4, f"exit {rc}, expected 4:\n{text}")
    saved = [p for p in os.listdir(e2e.ARGS.workdir) if p.startswith("moved.h5.displaced-")]
    check(len(saved) == 1 and saved[0] in text, f"no saved copy named in the message ({saved}):\n{text}")
    status, n = rows(os.path.join(e2e.ARGS.workdir, saved[0]))
    print(f"  replaced after step {seen}: the copy holds {n} steps, status {status[:70]}...")
    check(status.startswith("failed: 0: results file") and "replaced or removed" in status, f"status {status!r}")
    check(n >= seen, f"the copy holds {n} steps, {seen} were printed before the file was replaced")


def signal_scenario(sig, code):
    path = os.path.join(e2e.ARGS.workdir, "signalled.h5")
    proc, printed, err, threads = launch(TINY + ["--set", "train.steps=5000"], path)
    wait_for_step(printed, proc, 3)
    proc.send_signal(sig)
    t0 = time.monotonic()
    sent_after = printed[-1][1]
    rc = finish(proc, threads, timeout=60)
    took = time.monotonic() - t0
    text = "".join(err)
    name = signal.Signals(sig).name
    print(f"  {name} after step {sent_after}: exit {rc} after {took:.2f} s")
    check(rc == code, f"exit {rc}, expected {code}:\n{text}")
    check("Segmentation" not in text and "Caught signal" not in text, f"not a clean end:\n{text}")
    check(took < 10, f"{took:.1f} s from the signal to the exit")
    status, n = rows(path)
    check(status.startswith("failed: ") and f"terminated by {name}" in status, f"status {status!r}")
    check(n >= sent_after, f"the file holds {n} steps, {sent_after} were printed before the signal")


def scenario_sigterm():
    signal_scenario(signal.SIGTERM, 143)


def scenario_sigint():
    signal_scenario(signal.SIGINT, 130)


def scenario_short_file():
    path = os.path.join(e2e.ARGS.workdir, "whole.h5")
    e2e.run(TINY + ["--set", "train.steps=2"], out=path, expect_rc=0)
    # Cut inside the superblock (HDF5 then speaks of the "superblock", which held the word "lock"), and
    # after it (HDF5: "truncated file").
    for size in (8, 16, 2048):
        short = os.path.join(e2e.ARGS.workdir, f"short{size}.h5")
        with open(path, "rb") as f, open(short, "wb") as g:
            g.write(f.read(size))
        insp = subprocess.run([e2e.ARGS.hzpbench, "inspect", short], capture_output=True, text=True)
        text = insp.stdout + insp.stderr
        print(f"  inspect of the first {size} bytes: exit {insp.returncode}: {text.strip()[:300]}")
        check(insp.returncode != 0, "a cut file was read as a results file")
        check("locked" not in text, f"blames a lock:\n{text}")
        check("truncated" in text or "damaged" in text, f"does not say the file is cut or damaged:\n{text}")


def scenario_default_names():
    cmd = [e2e.ARGS.hzpbench, "run"] + TINY + ["--set", "train.steps=2"]
    procs = [subprocess.Popen(cmd, cwd=e2e.ARGS.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        check(p.returncode == 0, f"a run started beside others failed ({p.returncode}):\n{err}")
    files = sorted(os.listdir(os.path.join(e2e.ARGS.workdir, "results")))
    print(f"  {files}")
    check(len([f for f in files if f.endswith(".h5")]) == 3, f"three runs, files {files}")


if __name__ == "__main__":
    sys.exit(e2e.main(globals()))
