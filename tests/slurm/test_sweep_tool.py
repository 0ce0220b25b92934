"""slurm/sweep without Slurm: spec checks (one line naming field, value, fix), expansion, names, the job
script, validation through the real `hzpbench validate`, and a run-local sweep whose tasks end ok,
failed, diverged and killed (time limit), read back by `status` and picked by `resubmit`.
HZPBENCH (set by CTest) names the program."""
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "slurm"))

from hzpsweep import batch_script, cli, slurm_client, spec, toml_out  # noqa: E402

HZPBENCH = os.environ.get("HZPBENCH") or str(REPO / "build" / "bin" / "hzpbench")


def write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


BASE = """
[sweep]
name = "abl"
results_dir = "{root}"
ranks_per_node = 2
time_per_task = "00:10:00"

[base]
model.preset = "tiny"
train.steps = 6
train.warmup_steps = 1

[axes]
"scheduler.name" = ["ddp", "zero1", "zero3"]
"train.micro_batch_size" = [2, 4]

[[exclude]]
"scheduler.name" = "ddp"
"train.micro_batch_size" = 4
"""


def test_expansion_names_exclusions_and_world_size(tmp_path):
    s = spec.load(write(tmp_path, BASE.format(root=tmp_path)))
    assert [t.name for t in s.tasks] == ["name-ddp_micro_batch_size-2", "name-zero1_micro_batch_size-2",
                                         "name-zero1_micro_batch_size-4", "name-zero3_micro_batch_size-2",
                                         "name-zero3_micro_batch_size-4"]
    assert s.excluded == 1 and [t.index for t in s.tasks] == list(range(5))
    t = s.tasks[2]
    assert t.config == {"model.preset": "tiny", "train.steps": 6, "train.warmup_steps": 1, "scheduler.name": "zero1",
                        "train.micro_batch_size": 4, "topology.world_size": 2, "output.checkpoint_on_signal": True}
    assert s.time_per_task_s == 600


def test_repeats_and_resource_axes(tmp_path):
    s = spec.load(write(tmp_path, f"""
[sweep]
name = "r"
results_dir = "{tmp_path}"
repeats = 2
[base]
model.preset = "tiny"
[axes]
nodes = [1, 2]
ranks_per_node = [2, 4]
[[exclude]]
nodes = 2
ranks_per_node = 4
"""))
    assert [(t.name, t.world_size) for t in s.tasks] == [
        ("nodes-1_ranks_per_node-2_r0", 2), ("nodes-1_ranks_per_node-2_r1", 2),
        ("nodes-1_ranks_per_node-4_r0", 4), ("nodes-1_ranks_per_node-4_r1", 4),
        ("nodes-2_ranks_per_node-2_r0", 4), ("nodes-2_ranks_per_node-2_r1", 4)]
    assert all("nodes" not in t.config and t.config["topology.world_size"] == t.world_size for t in s.tasks)


@pytest.mark.parametrize("text,message", [
    ("[sweep]\nname = \"a b\"", "sweep.name = 'a b' must be a folder name"),
    ("[sweep]\nname = \"a\"\nrepeat = 2", "unknown field sweep.repeat; did you mean 'repeats'?"),
    ("[sweep]\nname = \"a\"\nrepeats = 0", "sweep.repeats = 0 must be an integer >= 1"),
    ("[sweep]\nname = \"a\"\ntime_per_task = \"1h\"", "sweep.time_per_task = '1h' is not a Slurm duration"),
    ("[sweep]\nname = \"a\"\nlauncher = \"mpirun\"", "sweep.launcher = 'mpirun' is not a launcher; use 'srun' or 'mpiexec'"),
    ("[sweep]\nname = \"a\"\n[axes]\n\"train.lr\" = 0.1", "axes.'train.lr' = 0.1 is not a non-empty list; write [0.1]"),
    ("[sweep]\nname = \"a\"\n[axes]\nnode = [1, 2]", "axes.'node' is neither a resource axis"),
    ("[sweep]\nname = \"a\"\n[base]\ntopology.world_size = 4", "'topology.world_size' is set by the sweep"),
    ("[sweep]\nname = \"a\"\n[axes]\n\"train.lr\" = [0.1]\n[[exclude]]\n\"train.lr\" = 0.2",
     "exclude[0]: 'train.lr' = 0.2 is not among the axis values [0.1]"),
    ("[sweep]\nname = \"a\"\n[axes]\n\"train.lr\" = [0.1]\n[[exclude]]\n\"train.lr\" = 0.1",
     "every combination of the axes is excluded"),
    ("[sweep]\nname = \"a\"\n[axes]\n\"train.lr\" = [0.1, 0.1]", "repeats a value"),
    ("[sweep]\nname = \"a\"\nranks_per_node = 2\n[axes]\nranks_per_node = [2]", "'ranks_per_node' is both"),
    ("[sweeps]\nname = \"a\"", "unknown table [sweeps]; did you mean 'sweep'?"),
    ("[sweep]\nname = \"a\"\nrequeue = 1", "sweep.requeue = 1 must be true or false"),
    ("[sweep]\nname = \"a\"\nsignal_grace = 0", "sweep.signal_grace = 0 must be whole seconds from 1 to 65535"),
    ("[sweep]\nname = \"a\"\nsignal_grace = \"90s\"", "sweep.signal_grace = '90s' must be whole seconds"),
    ("[sweep]\nname = \"a\"\ntime_per_task = 1\nsignal_grace = 60",
     "sweep.signal_grace = 60 s is not shorter than sweep.time_per_task (60 s)"),
    ("[sweep]\nname = \"a\"\ncheckpoint_every = -1", "sweep.checkpoint_every = -1 must be an integer >= 0"),
    ("[sweep]\nname = \"a\"\n[base]\noutput.checkpoint_dir = \"/x\"", "'output.checkpoint_dir' is set by the sweep"),
    ("[sweep]\nname = \"a\"\n[base]\noutput.checkpoint_on_signal = false",
     "a signalled task would stop without a checkpoint to resume; remove the key, or set sweep.requeue = false"),
    ("[sweep\nname = 1", "is not valid TOML"),
])
def test_bad_specs_get_one_line_naming_the_field(tmp_path, text, message):
    with pytest.raises(spec.SpecError) as e:
        spec.load(write(tmp_path, text))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_durations():
    assert [spec.parse_duration("t", v) for v in (30, "30", "05:00", "01:30:00", "2-00", "1-02:03:04")] == [
        1800, 1800, 300, 5400, 172800, 93784]
    assert spec.slurm_time(93784) == "1-02:03:04" and spec.slurm_time(300) == "00:05:00"


def test_config_files_read_back_to_the_same_values():
    cfg = {"a.s": 'q"uo\\te\nnew', "a.i": -3, "a.f": 1e-05, "a.g": 2.0, "a.b": True, "a.l": [1, 2], "b.c-d.e": "x"}
    back = tomllib.loads(toml_out.dumps(cfg, "header\nline two"))
    assert back == {"a": {"s": cfg["a.s"], "i": -3, "f": 1e-05, "g": 2.0, "b": True, "l": [1, 2]}, "b": {"c-d": {"e": "x"}}}


def test_array_spec_compresses_runs():
    assert slurm_client.array_spec([7, 0, 1, 2, 5, 8]) == "0-2,5,7-8"
    assert slurm_client.array_spec([3]) == "3"


def test_job_script(tmp_path):
    text = BASE.format(root=tmp_path).replace(
        "ranks_per_node = 2", 'ranks_per_node = 2\ngpus_per_node = 4\npartition = "gpu"\nsbatch_args = ["--qos=high"]')
    s = spec.load(write(tmp_path, text + '\n[sweep.env]\nUCX_TLS = "rc"\n'))
    text = batch_script.render(s, (1, 2), tmp_path / "abl", "/opt/hzpbench", overcommit=True)
    for line in ("#SBATCH --nodes=1", "#SBATCH --ntasks=2", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --time=00:10:00", "#SBATCH --partition=gpu", "#SBATCH --overcommit", "#SBATCH --qos=high",
                 "export NCCL_DEBUG=WARN", "export UCX_TLS=rc", "export OPENBLAS_NUM_THREADS=1",
                                  "#SBATCH --signal=USR1@90", "#SBATCH --requeue", "#SBATCH --open-mode=append",
                 'srun --mpi=pmi2 --kill-on-bad-exit=1 --ntasks-per-node=2 --overcommit /opt/hzpbench run --config '
                 '"$sweep_dir/configs/$task.toml" --out "$sweep_dir/$task.h5" --set "output.checkpoint_dir=$ckpt_dir" '
                 '"${resume[@]}" >> "$sweep_dir/$task.log" 2>&1'):
        assert line in text.splitlines(), line
    # With --overcommit, Slurm refuses --ntasks-per-node above a node's CPUs: srun lays the ranks out instead.
    assert "#SBATCH --ntasks-per-node=2" not in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    s.launcher = "mpiexec"
    plain = batch_script.render(s, (2, 4), tmp_path, "/opt/hzpbench", False)
    assert 'mpiexec -n "$SLURM_NTASKS" -ppn 4 /opt/hzpbench run' in plain
    assert "#SBATCH --ntasks=8" in plain and "#SBATCH --ntasks-per-node=4" in plain and "--overcommit" not in plain


def sweep_cli(*args):
    p = subprocess.run([sys.executable, str(REPO / "slurm" / "sweep"), *args], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    return p.returncode, p.stdout, p.stderr


def test_plan_validates_every_task_with_hzpbench(tmp_path):
    rc, out, err = sweep_cli("plan", str(write(tmp_path, BASE.format(root=tmp_path))), "--hzpbench", HZPBENCH)
    assert rc == 0, err
    assert "sweep abl: 5 task(s) = 5 configuration(s) x 1 repeat(s), 1 combination(s) excluded" in out
    assert "validated  5 distinct configuration(s)" in out and "at most 0.83 node-hours" in out
    assert not (tmp_path / "abl").exists()      # a plan writes nothing
    # A key hzpbench does not know: refused by hzpbench validate itself, with its suggestion, once.
    bad = write(tmp_path, BASE.format(root=tmp_path).replace('"train.micro_batch_size"', '"train.micro_batch_sise"'), "b.toml")
    rc, out, err = sweep_cli("plan", str(bad), "--hzpbench", HZPBENCH)
    assert rc == 2 and "refused 5 task(s)" in err and "Did you mean 'train.micro_batch_size'" in err
    assert len(err.strip().splitlines()) == 1
    # A value hzpbench refuses for the world size (global batch not divisible): only those tasks named.
    odd = write(tmp_path, BASE.format(root=tmp_path).replace("[2, 4]", "[2, 3]").replace(
        '"train.micro_batch_size" = 4', '"train.micro_batch_size" = 3'), "c.toml")
    rc, out, err = sweep_cli("plan", str(odd), "--hzpbench", HZPBENCH)
    assert rc == 2 and "refused 2 task(s)" in err, err


def test_out_overrides_results_dir(tmp_path):
    s = write(tmp_path, BASE.format(root=tmp_path / "from_spec"))
    elsewhere = tmp_path / "scratch"
    rc, out, err = sweep_cli("submit", str(s), "--dry-run", "--out", str(elsewhere), "--hzpbench", HZPBENCH)
    assert rc == 0, err
    assert f'--out "$sweep_dir/$task.h5"' in out and f"sweep_dir={elsewhere / 'abl'}" in out.replace("'", ""), out
    assert str(tmp_path / "from_spec") not in out


LOCAL = """
[sweep]
name = "local"
results_dir = "{root}"
time_per_task = "00:08"
requeue = false      # the time limit's SIGTERM stays a kill here (the preemption tests are below)

[base]
model.preset = "tiny"
train.steps = 8
train.warmup_steps = 1
output.flush_s = 0.0

[axes]
"debug.nan_at" = [-1, 4]
"debug.throw_at" = ["", "0:3"]
"train.steps" = [8, 1000000]

[[exclude]]
"debug.nan_at" = 4
"debug.throw_at" = "0:3"
[[exclude]]
"train.steps" = 1000000
"debug.nan_at" = 4
[[exclude]]
"train.steps" = 1000000
"debug.throw_at" = "0:3"
"""


def test_run_local_status_and_resubmit(tmp_path):
    s = write(tmp_path, LOCAL.format(root=tmp_path))
    rc, out, err = sweep_cli("run-local", str(s), "--hzpbench", HZPBENCH)
    assert rc == 1, (out, err)                    # some tasks failed, as they should
    d = tmp_path / "local"
    rc, out, err = sweep_cli("status", str(d), "--json")
    assert rc == 1
    st = {r["name"]: r for r in json.loads(out)}
    assert {n: r["state"] for n, r in st.items()} == {
        "nan_at--1_throw_at-_steps-8": "ok",
        "nan_at--1_throw_at-_steps-1000000": "killed",
        "nan_at--1_throw_at-0_3_steps-8": "failed",
        "nan_at-4_throw_at-_steps-8": "diverged"}
    assert "debug.throw_at: injected failure on rank 0 before step 3" in st["nan_at--1_throw_at-0_3_steps-8"]["detail"]
    assert st["nan_at--1_throw_at-_steps-8"]["steps"] == "8/8"
    killed = st["nan_at--1_throw_at-_steps-1000000"]
    assert "TIMEOUT (sweep.time_per_task)" in killed["detail"] and killed["job"] == "local"
    # The results file records which sweep and task wrote it.
    import h5py
    with h5py.File(d / "nan_at--1_throw_at-_steps-8.h5", "r") as f:
        assert f.attrs["env.HZP_SWEEP"] == "local" and f.attrs["env.HZP_SWEEP_TASK"] == "nan_at--1_throw_at-_steps-8"
    # The spec file names the sweep as well as its folder does; the table says the same.
    rc, table, _ = sweep_cli("status", str(s))
    assert "tasks: 1 ok, 1 diverged, 1 failed, 1 killed" in table

    rc, out, _ = sweep_cli("resubmit", str(d), "--local", "--dry-run")
    assert rc == 0 and "would run 2 task(s)" in out and "diverged" not in out
    rc, out, _ = sweep_cli("resubmit", str(d), "--local", "--dry-run", "--include-diverged")
    assert "would run 3 task(s)" in out
    # Rerun the failed one for real: its old files move aside, the new attempt fails the same way.
    rc, out, err = sweep_cli("resubmit", str(d), "--local", "--tasks", "nan_at--1_throw_at-0_3_steps-8")
    assert rc == 1 and "kept nan_at--1_throw_at-0_3_steps-8.h5 -> superseded/nan_at--1_throw_at-0_3_steps-8.attempt1.h5" in out
    assert (d / "superseded" / "nan_at--1_throw_at-0_3_steps-8.attempt1.log").is_file()
    rc, out, _ = sweep_cli("status", str(d), "--json")
    assert {r["name"]: r["state"] for r in json.loads(out)}["nan_at--1_throw_at-0_3_steps-8"] == "failed"
    # A second run-local of the same spec refuses rather than overwrite.
    rc, out, err = sweep_cli("run-local", str(s), "--hzpbench", HZPBENCH)
    assert rc == 2 and "already holds sweep 'local'" in err
    rc, out, err = sweep_cli("resubmit", str(d), "--tasks", "nope")
    assert rc == 2 and "no task named nope" in err


def test_without_squeue_a_running_file_is_not_called_killed(tmp_path, monkeypatch):
    """A file at `running` whose job Slurm ran, read where no squeue answers: it may still be running, so
    status must not say killed (resubmit would run it twice)."""
    from hzpsweep import sweep_dir, task_status
    s = write(tmp_path, LOCAL.format(root=tmp_path).replace('time_per_task = "00:08"', 'time_per_task = "00:04"')
              .replace('"debug.nan_at" = [-1, 4]', '"debug.nan_at" = [-1]').replace('"debug.throw_at" = ["", "0:3"]', '"debug.throw_at" = [""]')
              .split("[[exclude]]")[0])
    rc, out, err = sweep_cli("run-local", str(s), "--hzpbench", HZPBENCH)
    d = tmp_path / "local"
    # The runner's time limit ends the task with SIGTERM, which the run catches and records; a task SIGKILLed
    # (or on a node that died) leaves its file at `running`, which is what this test is about.
    import h5py
    with h5py.File(d / "nan_at--1_throw_at-_steps-1000000.h5", "r+") as f:
        assert "terminated by SIGTERM" in f.attrs["status"]
        f.attrs["status"] = "running"
        f.attrs["end_time"] = ""
    m = sweep_dir.read_manifest(d)
    local = {r.name: r.state for r in task_status.collect(d, m)}
    assert local == {"nan_at--1_throw_at-_steps-8": "ok", "nan_at--1_throw_at-_steps-1000000": "killed"}, (out, err)
    m["attempts"].append(sweep_dir.slurm_attempt("999", [0, 1], "job-1n-1r.sbatch"))
    monkeypatch.setattr(slurm_client, "available", lambda: False)
    rows = {r.name: r for r in task_status.collect(d, m)}
    assert rows["nan_at--1_throw_at-_steps-1000000"].state == "running"
    assert "Slurm not reachable" in rows["nan_at--1_throw_at-_steps-1000000"].detail
    assert rows["nan_at--1_throw_at-_steps-8"].state == "ok"     # a finished file needs no Slurm
    assert not rows["nan_at--1_throw_at-_steps-1000000"].needs_rerun(include_diverged=True)
    # A run that checkpointed on the signal says `preempted: ...` (docs/checkpoints.md): its own state, rerun by
    # resubmit, the checkpoint named in the detail.
    with h5py.File(d / "nan_at--1_throw_at-_steps-1000000.h5", "r+") as f:
        f.attrs["status"] = "preempted: SIGTERM after step 3; checkpoint /x/t.step3.ckpt.h5 (hzpbench run --resume it)"
    rows = {r.name: r for r in task_status.collect(d, m)}
    pre = rows["nan_at--1_throw_at-_steps-1000000"]
    assert pre.state == "preempted" and "/x/t.step3.ckpt.h5" in pre.detail and pre.needs_rerun(include_diverged=False)
