#!/usr/bin/env python3
"""Checkpoints through `hzpbench run` (docs/checkpoints.md): written, kept, resumed, refused, signalled.

Scenarios (one CTest each, see run_tests.cmake):
  resume     a run of 8 steps with output.checkpoint_every = 4 against the same run resumed (--resume) from its
             step-4 checkpoint: the resumed file starts at step 4, names what it continues, ends ok, and its
             losses equal the uninterrupted run's steps 5..8 bitwise (the final loss too); checkpoint_keep = 1
             leaves only the newest checkpoint
  reshard    deterministic mode: zero3 at 2 ranks checkpoints after step 4, `none` on one rank resumes it; its
             losses equal `none` uninterrupted bitwise (every layout computes none's bits in deterministic mode)
  refusals   --resume of a missing file, a file with a flipped byte, a cut file, another model shape and
             another precision: exit 2, one message naming the file (and the field), no results file
  preempt    SIGTERM to the job with output.checkpoint_on_signal: exit 5, status `preempted: ...` naming the checkpoint
             written after the step in flight, which resumes and ends ok
  killed     SIGKILL at a random moment while checkpointing after every step: every complete checkpoint left
             (never a .partial) resumes and ends ok
  nd         nd's layouts at --ranks: tp2, pp2, cp2, ep2 (tiny-moe), pp2 on tiny-moe (each stage's balancing bias) and
             tp2 with the distributed optimizer, 6 steps uninterrupted against 3, a checkpoint, --resume in the same
             layout and 3 more: losses bitwise
  nd_bf16    the same in bf16-mixed for tp2, pp2 and cp2 (and at 4 ranks tp2 with the distributed optimizer)
  asynchzp   asynchzp's pipeline stages and context parallelism at --ranks (pp2, cp2, pp2 on tiny-moe; at 4 ranks also
             with data parallelism inside a stage and pp2 x cp2), fp32 (bf16-mixed for two of them): 6 steps against
             3 + --resume 3, bitwise;
             and pp2 stopped by SIGTERM with output.checkpoint_on_signal: exit 5, preempted, and the checkpoint resumes
  nd_reshard deterministic mode at 2 ranks: nd pp2 (untied embeddings, where nd computes none's bits) resumed by
             zero3 at 2 ranks and by `none` at 1, each bitwise `none` uninterrupted; nd tp2 resumed by `none`, within
             1e-5 of `none` uninterrupted (tensor-parallel sums add in another order), which a misplaced piece
             would miss by far; and the other way, zero3 at 2 ranks resumed by nd pp2 (bitwise) and nd tp2 (1e-5)
  asynchzp_reshard
             deterministic mode, untied embeddings: asynchzp pp2 at 2 ranks resumed by `none` and by zero3, zero3
             resumed by asynchzp pp2 at 2 and at 4 ranks (dp2 inside each stage), each bitwise `none` uninterrupted;
             asynchzp cp2 resumed by nd cp2 and nd cp2 by asynchzp cp2, bitwise asynchzp cp2 uninterrupted (both add
             the context-parallel attention's blocks in the same order); asynchzp cp2 resumed by `none`, within 1e-5
             of `none` uninterrupted (the ring attention adds its blocks in another order than one whole sequence)

usage: checkpoint_run_test.py SCENARIO --hzpbench PATH --mpiexec PATH --ranks N --workdir DIR
"""
import glob
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_e2e_test as e2e  # noqa: E402  (h5py/numpy import and the skip live there)
from run_e2e_test import attr, check  # noqa: E402
import results_durability_test as dur  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402

# No link emulation: the numbers are what is compared, and sleeps only slow the test.
TINY = ["--set", "model.preset=tiny", "--set", "train.warmup_steps=1", "--set", "links.emulate=false"]


def path(name):
    return os.path.join(e2e.ARGS.workdir, name)


def losses(p):
    with h5py.File(p, "r", locking=False) as f:
        return np.array(f["steps/loss"][:]), attr(f, "status"), dict(f.attrs)


def checkpoints(prefix):
    return sorted(glob.glob(path(prefix + ".step*.ckpt.h5")), key=lambda s: int(s.split(".step")[1].split(".")[0]))


def scenario_resume():
    w = e2e.ARGS.ranks
    base = TINY + ["--set", "train.steps=8"]
    e2e.run(base, ranks=w, out=path("whole.h5"), expect_rc=0)
    e2e.run(base + ["--set", "output.checkpoint_every=4", "--set", "output.checkpoint_keep=1"], ranks=w,
            out=path("first.h5"), expect_rc=0)
    kept = checkpoints("first")
    check([os.path.basename(k) for k in kept] == ["first.step8.ckpt.h5"], f"checkpoint_keep = 1 kept {kept}")
    # The step-4 checkpoint was removed once step 8's was whole: write it again with keep = 2.
    e2e.run(base + ["--set", "output.checkpoint_every=4"], ranks=w, out=path("second.h5"), expect_rc=0)
    kept = checkpoints("second")
    check(len(kept) == 2 and kept[0].endswith("second.step4.ckpt.h5"), f"checkpoints {kept}")
    rc, out, err, _ = e2e.run(base + ["--resume", kept[0]], ranks=w, out=path("resumed.h5"), expect_rc=0)
    whole, status_w, _ = losses(path("whole.h5"))
    resumed, status_r, a = losses(path("resumed.h5"))
    print(f"  uninterrupted {whole}\n  resumed        {resumed}")
    check(status_r == "ok" and status_w == "ok", f"status {status_w}, {status_r}")
    check(int(a["first_step"]) == 4 and int(a["resumed_from_step"]) == 3, f"first_step {a['first_step']}")
    check(attr_text(a, "resumed_from") == kept[0], f"resumed_from {a['resumed_from']}")
    check(attr_text(a, "resumed_from_results").endswith("second.h5"), f"resumed_from_results {a['resumed_from_results']}")
    check(len(resumed) == 4, f"the resumed file holds {len(resumed)} steps, expected 4 (steps 5..8)")
    check(np.array_equal(resumed, whole[4:]), "the resumed losses differ from the uninterrupted run's")
    check(resumed[-1] == whole[-1], "the final loss differs")


def scenario_reshard():
    det = TINY + ["--set", "train.steps=8", "--set", "train.deterministic=true"]
    e2e.run(det + ["--set", "scheduler.name=none"], ranks=1, out=path("none.h5"), expect_rc=0)
    e2e.run(det + ["--set", "scheduler.name=zero3", "--set", "output.checkpoint_every=4"], ranks=2,
            out=path("zero3.h5"), expect_rc=0)
    ck = checkpoints("zero3")[0]
    e2e.run(det + ["--set", "scheduler.name=none", "--resume", ck], ranks=1, out=path("resumed.h5"), expect_rc=0)
    whole, _, _ = losses(path("none.h5"))
    resumed, status, a = losses(path("resumed.h5"))
    print(f"  none uninterrupted {whole[4:]}\n  zero3@2 -> none@1  {resumed}")
    check(status == "ok" and int(a["resumed_from_world_size"]) == 2, f"{status}, {a.get('resumed_from_world_size')}")
    check(attr_text(a, "resumed_from_scheduler") == "zero3", f"resumed_from_scheduler {a['resumed_from_scheduler']}")
    check(np.array_equal(resumed, whole[4:]), "the resumed losses differ from none's uninterrupted run")


def nd_layouts(w):
    dp = ["--set", "scheduler.name=nd"]
    out = {"tp2": dp + ["--set", "scheduler.tp=2"], "pp2": dp + ["--set", "scheduler.pp=2"],
           "cp2": dp + ["--set", "scheduler.cp=2"],
           "ep2": dp + ["--set", "scheduler.ep=2", "--set", "model.preset=tiny-moe"],
           # each stage updates the balancing bias of its own layers: the checkpoint holds both stages' parts
           "pp2_moe": dp + ["--set", "scheduler.pp=2", "--set", "model.preset=tiny-moe"],
           # the distributed optimizer's two shard layouts: dense over data x context, experts over expert-data
           "ep2_distopt": dp + ["--set", "scheduler.ep=2", "--set", "model.preset=tiny-moe",
                                "--set", "scheduler.distributed_optimizer=true"]}
    if w >= 4:
        out["tp2_distopt"] = dp + ["--set", "scheduler.tp=2", "--set", "scheduler.distributed_optimizer=true"]
        out["ep2_tp2_distopt"] = dp + ["--set", "scheduler.ep=2", "--set", "scheduler.tp=2", "--set",
                                       "model.preset=tiny-moe", "--set", "scheduler.distributed_optimizer=true"]
    return out


def resume_layouts(layouts, precision="fp32"):
    """Each layout: 6 steps uninterrupted against 3, a checkpoint, --resume in the same layout and 3 more, bitwise."""
    w = e2e.ARGS.ranks
    for name, layout in layouts.items():
        name = f"{name}_{precision}"
        base = TINY + ["--set", "train.steps=6", "--set", f"train.precision={precision}"] + layout
        e2e.run(base, ranks=w, out=path(f"{name}_whole.h5"), expect_rc=0)
        e2e.run(base + ["--set", "output.checkpoint_every=3"], ranks=w, out=path(f"{name}.h5"), expect_rc=0)
        ck = checkpoints(name)
        check(len(ck) == 2, f"{name}: checkpoints {ck}")
        e2e.run(base + ["--resume", ck[0]], ranks=w, out=path(f"{name}_resumed.h5"), expect_rc=0)
        whole, _, _ = losses(path(f"{name}_whole.h5"))
        resumed, status, a = losses(path(f"{name}_resumed.h5"))
        print(f"  {name}: uninterrupted {whole[3:]}\n  {name}: resumed       {resumed}")
        check(status == "ok" and int(a["first_step"]) == 3, f"{name}: {status}, first_step {a.get('first_step')}")
        check(np.array_equal(resumed, whole[3:]), f"{name}: the resumed losses differ from the uninterrupted run's")


def scenario_nd():
    resume_layouts(nd_layouts(e2e.ARGS.ranks))
    if e2e.ARGS.ranks >= 4:
        # The distributed optimizer's two shard layouts read by a layout with none: `none` on one rank continues the
        # ep2 x tp2 run (fp32 sums in another order: 1e-5, not bitwise).
        name = "ep2_tp2_distopt_fp32"
        base = TINY + ["--set", "train.steps=6", "--set", "model.preset=tiny-moe"]
        e2e.run(base + ["--set", "scheduler.name=none", "--resume", checkpoints(name)[0]], ranks=1,
                out=path("ep2_tp2_distopt_none.h5"), expect_rc=0)
        whole, _, _ = losses(path(f"{name}_whole.h5"))
        resumed, status, a = losses(path("ep2_tp2_distopt_none.h5"))
        worst = float(np.max(np.abs(resumed - whole[3:]) / np.abs(whole[3:])))
        print(f"  {name} -> none: largest relative loss difference {worst:.2e}")
        check(status == "ok" and int(a["first_step"]) == 3, f"{name} -> none: {status}")
        check(worst <= 1e-5, f"{name} -> none: largest relative loss difference {worst:.2e} > 1e-5")


def scenario_nd_bf16():
    # The MoE layouts stay fp32-only here: their bf16 state is the dense layouts' engine code.
    resume_layouts({k: v for k, v in nd_layouts(e2e.ARGS.ranks).items() if "moe" not in k and not k.startswith("ep2")},
                   "bf16-mixed")


def asynchzp_layouts(w):
    az = ["--set", "scheduler.name=asynchzp"]
    out = {"pp2": az + ["--set", "scheduler.pp=2"], "cp2": az + ["--set", "scheduler.cp=2"],
           "pp2_moe": az + ["--set", "scheduler.pp=2", "--set", "model.preset=tiny-moe"]}
    if w >= 4:
        # Data parallelism inside each stage (z1 = 2 of its 2 ranks, gradients over z2 = 1), and the paper's shape.
        out["pp2_dp2"] = az + ["--set", "scheduler.pp=2", "--set", "scheduler.z2=1"]
        out["cp2_z2"] = az + ["--set", "scheduler.cp=2", "--set", "scheduler.z1=4", "--set", "scheduler.z2=2",
                              "--set", "scheduler.z3=2"]
        out["pp2_cp2"] = az + ["--set", "scheduler.pp=2", "--set", "scheduler.cp=2"]
    return out


def scenario_asynchzp():
    w = e2e.ARGS.ranks
    layouts = asynchzp_layouts(w)
    resume_layouts(layouts)
    resume_layouts({k: layouts[k] for k in (("pp2", "cp2") if w < 4 else ("pp2_dp2", "pp2_cp2"))}, "bf16-mixed")
    # A signal checkpoints a pipeline's stages too: exit 5, preempted, and the checkpoint resumes.
    preempted(layouts["pp2"], "asynchzp_pp2")


def scenario_nd_reshard():
    det = TINY + ["--set", "train.steps=8", "--set", "train.deterministic=true", "--set", "model.tied_embeddings=false"]
    e2e.run(det + ["--set", "scheduler.name=none"], ranks=1, out=path("none.h5"), expect_rc=0)
    whole, _, _ = losses(path("none.h5"))
    nd = det + ["--set", "scheduler.name=nd", "--set", "output.checkpoint_every=4"]
    e2e.run(nd + ["--set", "scheduler.pp=2"], ranks=2, out=path("pp2.h5"), expect_rc=0)
    e2e.run(nd + ["--set", "scheduler.tp=2"], ranks=2, out=path("tp2.h5"), expect_rc=0)
    e2e.run(det + ["--set", "scheduler.name=zero3", "--set", "output.checkpoint_every=4"], ranks=2,
            out=path("zero3.h5"), expect_rc=0)
    nd_to = {"pp2": ["--set", "scheduler.name=nd", "--set", "scheduler.pp=2"],
             "tp2": ["--set", "scheduler.name=nd", "--set", "scheduler.tp=2"]}
    for src, to, ranks in (("pp2", "zero3", 2), ("pp2", "none", 1), ("tp2", "none", 1), ("zero3", "pp2", 2),
                           ("zero3", "tp2", 2)):
        out = path(f"{src}_{to}.h5")
        e2e.run(det + nd_to.get(to, ["--set", f"scheduler.name={to}"]) + ["--resume", checkpoints(src)[0]],
                ranks=ranks, out=out, expect_rc=0)
        resumed, status, a = losses(out)
        print(f"  none uninterrupted {whole[4:]}\n  {src} -> {to:5} {resumed}")
        check(status == "ok" and attr_text(a, "resumed_from_scheduler") == ("zero3" if src == "zero3" else "nd"),
              f"{src} -> {to}: {status}")
        if "tp2" not in (src, to):
            check(np.array_equal(resumed, whole[4:]), f"{src} -> {to}: the losses differ from none's")
        else:
            worst = float(np.max(np.abs(resumed - whole[4:]) / np.abs(whole[4:])))
            check(worst <= 1e-5, f"{src} -> {to}: largest relative loss difference {worst:.2e} > 1e-5")


def scenario_asynchzp_reshard():
    det = TINY + ["--set", "train.steps=8", "--set", "train.deterministic=true", "--set", "model.tied_embeddings=false"]
    e2e.run(det + ["--set", "scheduler.name=none"], ranks=1, out=path("none.h5"), expect_rc=0)
    none, _, _ = losses(path("none.h5"))
    layout = {"pp2": ["--set", "scheduler.name=asynchzp", "--set", "scheduler.pp=2"],
              "pp2_dp2": ["--set", "scheduler.name=asynchzp", "--set", "scheduler.pp=2", "--set", "scheduler.z2=1"],
              "cp2": ["--set", "scheduler.name=asynchzp", "--set", "scheduler.cp=2"],
              "nd_cp2": ["--set", "scheduler.name=nd", "--set", "scheduler.cp=2"]}
    every = ["--set", "output.checkpoint_every=4"]
    e2e.run(det + layout["pp2"] + every, ranks=2, out=path("pp2.h5"), expect_rc=0)
    e2e.run(det + layout["cp2"] + every, ranks=2, out=path("cp2.h5"), expect_rc=0)
    e2e.run(det + layout["nd_cp2"] + every, ranks=2, out=path("nd_cp2.h5"), expect_rc=0)
    e2e.run(det + ["--set", "scheduler.name=zero3"] + every, ranks=2, out=path("zero3.h5"), expect_rc=0)
    cp2, _, _ = losses(path("cp2.h5"))
    nd_cp2, _, _ = losses(path("nd_cp2.h5"))
    check(np.array_equal(cp2, nd_cp2), "asynchzp cp2 and nd cp2 differ uninterrupted (test_asynchzp_context's claim)")
    # (source, destination, its ranks, the uninterrupted run it must equal, tolerance: 0 = bitwise)
    for src, to, ranks, want, tol in (("pp2", "none", 1, none, 0), ("pp2", "zero3", 2, none, 0),
                                      ("zero3", "pp2", 2, none, 0), ("zero3", "pp2_dp2", 4, none, 0),
                                      ("cp2", "nd_cp2", 2, cp2, 0), ("nd_cp2", "cp2", 2, cp2, 0),
                                      ("cp2", "none", 1, none, 1e-5)):
        out = path(f"{src}_{to}.h5")
        e2e.run(det + layout.get(to, ["--set", f"scheduler.name={to}"]) + ["--resume", checkpoints(src)[0]],
                ranks=ranks, out=out, expect_rc=0)
        resumed, status, a = losses(out)
        print(f"  uninterrupted    {want[4:]}\n  {src} -> {to:7} {resumed}")
        check(status == "ok" and int(a["first_step"]) == 4, f"{src} -> {to}: {status}")
        if tol == 0:
            check(np.array_equal(resumed, want[4:]), f"{src} -> {to}: the losses differ bitwise")
        else:
            worst = float(np.max(np.abs(resumed - want[4:]) / np.abs(want[4:])))
            print(f"  {src} -> {to}: largest relative loss difference {worst:.2e}")
            check(worst <= tol, f"{src} -> {to}: largest relative loss difference {worst:.2e} > {tol:.0e}")


def attr_text(a, k):
    v = a[k]
    return v.decode() if isinstance(v, bytes) else str(v)


def expect_refused(extra, needles, label):
    out = path(f"refused_{label}.h5")
    rc, _, err, _ = e2e.run(TINY + ["--set", "train.steps=8"] + extra, ranks=e2e.ARGS.ranks, out=out)
    print(f"  {label}: {err.strip()[:300]}")
    check(rc == 2, f"{label}: exit {rc}, expected 2\n{err}")
    for n in needles:
        check(n in err, f"{label}: the message does not name {n!r}:\n{err}")
    check(not os.path.exists(out), f"{label}: a results file was left")


def scenario_refusals():
    w = e2e.ARGS.ranks
    e2e.run(TINY + ["--set", "train.steps=8", "--set", "output.checkpoint_every=2"], ranks=w, out=path("src.h5"),
            expect_rc=0)
    good = checkpoints("src")[0]
    data = open(good, "rb").read()
    flipped, cut = path("flipped.ckpt.h5"), path("cut.ckpt.h5")
    # A byte late in the file (array data, written after the metadata), and the first half only.
    at = len(data) * 3 // 4
    open(flipped, "wb").write(data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:])
    open(cut, "wb").write(data[: len(data) // 2])
    expect_refused(["--resume", path("none.ckpt.h5")], ["none.ckpt.h5"], "missing")
    expect_refused(["--resume", flipped], ["flipped.ckpt.h5"], "flipped")
    expect_refused(["--resume", cut], ["cut.ckpt.h5"], "cut")
    expect_refused(["--resume", good, "--set", "model.hidden=96"], [os.path.basename(good), "model"], "shape")
    expect_refused(["--resume", good, "--set", "train.precision=bf16-mixed"],
                   [os.path.basename(good), "train.precision"], "precision")


def preempted(layout, name):
    out = path(f"{name}.h5")
    # Checkpoints on the signal only (what slurm/sweep asks for): no periodic one is ever due.
    proc, printed, err, threads = dur.launch(TINY + layout + ["--set", "train.steps=5000", "--set",
                                                              "output.checkpoint_on_signal=true"], out)
    dur.wait_for_step(printed, proc, 3)
    proc.send_signal(signal.SIGTERM)
    rc = dur.finish(proc, threads, timeout=120)
    text = "".join(err)
    print(f"  exit {rc}: {text.strip()[-300:]}")
    check(rc == 5, f"exit {rc}, expected 5 (preempted):\n{text}")
    _, status, a = losses(out)
    print(f"  status: {status}")
    check(status.startswith("preempted: SIGTERM after step "), f"status {status!r}")
    ck = checkpoints(name)
    check(len(ck) == 1 and ck[0] in status, f"checkpoints {ck}, status {status!r}")
    with h5py.File(ck[0], "r", locking=False) as f:
        step = int(f.attrs["step"])
    n = len(losses(out)[0])
    check(step == n - 1, f"the checkpoint is after step {step + 1}, the file holds {n} steps")
    e2e.run(TINY + layout + ["--set", f"train.steps={step + 3}", "--resume", ck[0]],
            ranks=e2e.ARGS.ranks, out=path(f"{name}_after.h5"), expect_rc=0)
    resumed, status, a = losses(path(f"{name}_after.h5"))
    check(status == "ok" and len(resumed) == 2 and int(a["first_step"]) == step + 1, f"{status}, {len(resumed)} rows")


def scenario_preempt():
    preempted([], "preempted")


def scenario_killed():
    out = path("killed.h5")
    proc, printed, err, threads = dur.launch(TINY + ["--set", "train.steps=5000", "--set",
                                                     "output.checkpoint_every=1", "--set",
                                                     "output.checkpoint_keep=3"], out)
    dur.wait_for_step(printed, proc, 3)
    time.sleep(random.uniform(0, 0.5))
    # One rank (CTest runs this at W = 1): SIGKILL of mpiexec would leave its ranks behind.
    proc.kill()
    dur.finish(proc, threads, timeout=60)
    time.sleep(0.5)
    ck = checkpoints("killed")
    print(f"  complete checkpoints left: {[os.path.basename(c) for c in ck]}; partial: "
          f"{[os.path.basename(p) for p in glob.glob(path('*.partial'))]}")
    check(ck, "no complete checkpoint left")
    for c in ck[-2:]:
        with h5py.File(c, "r", locking=False) as f:
            step = int(f.attrs["step"])
        e2e.run(TINY + ["--set", f"train.steps={step + 2}", "--resume", c], ranks=e2e.ARGS.ranks,
                out=path(f"after{step}.h5"), expect_rc=0)


if __name__ == "__main__":
    sys.exit(e2e.main(globals()))
