"""slurm/sweep's preemption pieces without Slurm (docs/sweeps.md, "Preemption"): the keys a task gets, the job
script's resume-and-requeue logic run by bash against stand-ins for srun, scontrol and hzpbench, the newest
checkpoint, attempts kept aside, and a run-local task resumed by `resubmit --local` from its checkpoint, bitwise.
The real Slurm side is preempt_on_slurm_test.py. HZPBENCH (set by CTest) names the program."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "slurm"))

from hzpsweep import batch_script, checkpoints, spec, sweep_dir, task_status  # noqa: E402

HZPBENCH = os.environ.get("HZPBENCH") or str(REPO / "build" / "bin" / "hzpbench")


def load(tmp_path, sweep_extra="", base_extra=""):
    p = tmp_path / "s.toml"
    p.write_text(f"""
[sweep]
name = "p"
results_dir = "{tmp_path}"
ranks_per_node = 2
{sweep_extra}
[base]
model.preset = "tiny"
scheduler.name = "zero3"
{base_extra}""")
    return spec.load(p)


def test_task_keys_follow_requeue_and_checkpoint_every(tmp_path):
    t = load(tmp_path).tasks[0]
    assert t.config["output.checkpoint_on_signal"] is True and "output.checkpoint_every" not in t.config
    t = load(tmp_path, "checkpoint_every = 10").tasks[0]
    assert t.config["output.checkpoint_every"] == 10
    # The task's own value wins over the sweep's default cadence.
    t = load(tmp_path, "checkpoint_every = 10", "output.checkpoint_every = 3").tasks[0]
    assert t.config["output.checkpoint_every"] == 3
    s = load(tmp_path, "requeue = false\ncheckpoint_every = 10")
    assert "output.checkpoint_on_signal" not in s.tasks[0].config and "output.checkpoint_every" not in s.tasks[0].config
    text = batch_script.render(s, (1, 2), tmp_path / "p", "/opt/hzpbench", False)
    assert "--signal" not in text and "--requeue" not in text and "scontrol requeue" not in text
    # Without requeue the script still resumes from a checkpoint (a resubmitted task's).
    assert "--resume" in text
    s = load(tmp_path, "signal_grace = 300")
    assert "#SBATCH --signal=USR1@300" in batch_script.render(s, (1, 2), tmp_path, "/opt/hzpbench", False)


def stand_ins(bin_dir: Path, srun_rc: int, status: str):
    """srun records its arguments and exits srun_rc; scontrol records its own; hzpbench inspect prints a status."""
    bin_dir.mkdir()
    for name, body in (("srun", f'echo "$@" > "$STANDIN_LOG/srun.args"\nexit {srun_rc}'),
                       ("scontrol", 'echo "$@" > "$STANDIN_LOG/scontrol.args"'),
                       ("hzpbench", f"echo '{{\"status\": \"{status}\"}}'")):
        p = bin_dir / name
        p.write_text(f"#!/bin/bash\n{body}\n")
        p.chmod(0o755)


def run_script(tmp_path, srun_rc, status, ckpt_steps, old_results=True):
    s = load(tmp_path)
    d = tmp_path / "p"
    (d / "slurm").mkdir(parents=True)
    sweep_dir.write_task_list(s, d)
    task = s.tasks[0].name
    stand_ins(tmp_path / "bin", srun_rc, status)
    script = d / "job.sbatch"
    script.write_text(batch_script.render(s, (1, 2), d, str(tmp_path / "bin" / "hzpbench"), False))
    folder = checkpoints.task_dir(d, task)
    folder.mkdir(parents=True)
    for n in ckpt_steps:
        (folder / f"{task}.step{n}.ckpt.h5").write_text("x")
    (folder / f"{task}.step99.ckpt.h5.partial").write_text("x")     # being written: never resumed
    (folder / f"other.step50.ckpt.h5").write_text("x")              # not this task's
    if old_results:
        (d / f"{task}.h5").write_text("old")
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", STANDIN_LOG=str(tmp_path),
               SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_JOB_ID="41", SLURM_JOB_ID="47", SLURM_JOB_NODELIST="n1")
    p = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    scontrol = tmp_path / "scontrol.args"
    return (p.returncode, (tmp_path / "srun.args").read_text(), scontrol.read_text() if scontrol.exists() else "",
            d, task)


def test_job_script_resumes_newest_checkpoint_and_requeues_its_own_task(tmp_path):
    # srun reports a rank's MPI_Abort(5) as 137: the results file's `preempted` status decides the requeue.
    rc, args, scontrol, d, task = run_script(tmp_path, 137, "preempted: SIGUSR1 after step 12; ...", [3, 12])
    assert rc == 137
    assert f"--resume {d}/checkpoints/{task}/{task}.step12.ckpt.h5" in args
    assert f"--set output.checkpoint_dir={d}/checkpoints/{task}" in args
    # This array task's own job id, never the array's (which would requeue every task of it).
    assert scontrol.split() == ["requeue", "47"]
    # The results file it continues is kept as the previous attempt.
    assert (d / "superseded" / f"{task}.attempt1.h5").read_text() == "old" and not (d / f"{task}.h5").exists()
    log = (d / f"{task}.log").read_text()
    assert "resuming from" in log and "(after step 12)" in log and "requeueing job 47" in log


def test_job_script_starts_fresh_and_does_not_requeue_a_finished_run(tmp_path):
    rc, args, scontrol, d, task = run_script(tmp_path, 0, "ok", [], old_results=False)
    assert rc == 0 and "--resume" not in args and scontrol == ""
    assert not (d / "superseded").exists()


def test_latest_checkpoint_and_attempts_kept_aside(tmp_path):
    d = tmp_path
    assert checkpoints.latest(d, "t") is None
    folder = checkpoints.task_dir(d, "t")
    folder.mkdir(parents=True)
    for name in ("t.step9.ckpt.h5", "t.step10.ckpt.h5", "t.step11.ckpt.h5.partial", "tt.step12.ckpt.h5"):
        (folder / name).write_text("x")
    assert checkpoints.latest(d, "t") == (folder / "t.step10.ckpt.h5", 10)   # numeric, not by name
    (d / "t.h5").write_text("a")
    assert sweep_dir.supersede(d, "t") == ["t.h5 -> superseded/t.attempt1.h5"] and folder.is_dir()
    (d / "t.h5").write_text("b")
    moved = sweep_dir.supersede(d, "t", restart=True)
    assert moved == ["t.h5 -> superseded/t.attempt2.h5", "checkpoints/t -> superseded/t.attempt2.checkpoints"]
    assert checkpoints.latest(d, "t") is None


def sweep_cli(*args):
    p = subprocess.run([sys.executable, str(REPO / "slurm" / "sweep"), *args], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    return p.returncode, p.stdout, p.stderr


def test_resubmit_local_resumes_a_killed_task_from_its_checkpoint(tmp_path):
    import h5py
    import numpy as np
    s = tmp_path / "s.toml"
    s.write_text(f"""
[sweep]
name = "r"
results_dir = "{tmp_path}"
hzpbench = "{HZPBENCH}"
checkpoint_every = 3
[base]
model.preset = "tiny"
train.steps = 8
train.warmup_steps = 1
""")
    rc, out, err = sweep_cli("run-local", str(s))
    assert rc == 0, (out, err)
    d = tmp_path / "r"
    ck = d / "checkpoints" / "r0"
    assert sorted(p.name for p in ck.iterdir()) == ["r0.step3.ckpt.h5", "r0.step6.ckpt.h5"]
    with h5py.File(d / "r0.h5", "r") as f:
        whole = np.array(f["steps/loss"][:])
    # As if the job had been SIGKILLed after step 7: the file left at `running`, its last row unflushed.
    with h5py.File(d / "r0.h5", "r+") as f:
        f.attrs["status"] = "running"
        f.attrs["end_time"] = ""
    rows = {r.name: r for r in task_status.collect(d, sweep_dir.read_manifest(d))}
    assert rows["r0"].state == "killed" and rows["r0"].resumes and "resubmit resumes from r0.step6.ckpt.h5" in rows["r0"].detail
    rc, out, err = sweep_cli("resubmit", str(d), "--local")
    assert rc == 0 and "resumes from r0.step6.ckpt.h5" in out, (out, err)
    with h5py.File(d / "r0.h5", "r") as f:
        assert f.attrs["status"] == "ok" and int(f.attrs["first_step"]) == 6
        assert np.array_equal(np.array(f["steps/loss"][:]), whole[6:])
    rc, out, _ = sweep_cli("status", str(d), "--json")
    st = json.loads(out)[0]
    assert rc == 0 and st["state"] == "ok" and st["steps"] == "8/8"     # the step reached, not the file's 2 rows
    assert (d / "superseded" / "r0.attempt1.h5").is_file()
