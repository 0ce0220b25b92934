"""The sweep tool's command line (docs/sweeps.md):

    slurm/sweep plan SPEC                 expand, validate every task, print the plan (writes nothing)
    slurm/sweep submit SPEC [--dry-run]   ... then write results/<sweep>/ and submit one job array per shape
    slurm/sweep run-local SPEC            ... then run the tasks one after another here, without Slurm
    slurm/sweep status SWEEP              per task: ok, failed (reason), diverged, killed, preempted, running, pending, never ran
    slurm/sweep resubmit SWEEP [--local]  submit (or run) again only the tasks that need it (killed and preempted
                                          ones resume from their newest checkpoint)

SWEEP is the sweep's folder (results/<name>) or its spec file. Exit codes: 0 done (status: every task ok),
1 status/resubmit found tasks not ok or a run failed, 2 bad input (nothing submitted).
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from pathlib import Path

from . import batch_script, hzpbench, local_runner, plan, slurm_client, spec, sweep_dir, task_status

EXIT_OK, EXIT_NOT_OK, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    pass


def _load(args) -> tuple[spec.Sweep, str]:
    sweep = spec.load(args.spec, hzpbench.default_program())
    if args.out:  # --out wins over the spec's results_dir, so one spec serves several scratch folders
        sweep.results_dir = Path(args.out).resolve()
    program = hzpbench.check_program(args.hzpbench or sweep.hzpbench)
    return sweep, program


def _prepare(args, query_slurm: bool) -> tuple[spec.Sweep, str, list[plan.ShapeGroup]]:
    sweep, program = _load(args)
    validated = plan.validate_all(sweep, program)
    groups = plan.shape_groups(sweep, query_slurm)
    print(plan.describe(sweep, groups, validated, program))
    return sweep, program, groups


def _materialize(sweep: spec.Sweep, program: str, groups: list[plan.ShapeGroup], with_scripts: bool) -> tuple[Path, dict]:
    d = sweep.sweep_dir
    if (d / sweep_dir.MANIFEST).exists():
        raise UsageError(f"'{d}' already holds sweep '{sweep.name}': see `slurm/sweep status {d}`, rerun what needs it "
                         f"with `slurm/sweep resubmit {d}`, or give the spec another sweep.name")
    d.mkdir(parents=True, exist_ok=True)
    (d / "slurm").mkdir(exist_ok=True)
    sweep_dir.write_configs(sweep, d)
    sweep_dir.write_task_list(sweep, d)
    m = sweep_dir.new_manifest(sweep, program, batch_script.job_environment(sweep))
    if with_scripts:
        _write_scripts(sweep, program, groups, d, m)
    sweep_dir.write_manifest(d, m)
    return d, m


def _write_scripts(sweep: spec.Sweep, program: str, groups: list[plan.ShapeGroup], d: Path, m: dict) -> None:
    for g in groups:
        p = d / sweep_dir.script_name(g.shape)
        p.write_text(batch_script.render(sweep, g.shape, d, program, g.overcommit))
        p.chmod(0o755)
        m["scripts"][f"{g.shape[0]}x{g.shape[1]}"] = p.name


def cmd_plan(args) -> int:
    _prepare(args, query_slurm=slurm_client.available())
    print("plan only: nothing written, nothing submitted")
    return EXIT_OK


def cmd_submit(args) -> int:
    if not args.dry_run:
        slurm_client.require()
    sweep, program, groups = _prepare(args, query_slurm=slurm_client.available())
    if args.dry_run:
        for g in groups:
            print(f"--- {sweep_dir.script_name(g.shape)} (would be submitted with --array="
                  f"{slurm_client.array_spec(g.indices)})")
            print(batch_script.render(sweep, g.shape, sweep.sweep_dir, program, g.overcommit), end="")
        print("dry run: nothing written, nothing submitted")
        return EXIT_OK
    d, m = _materialize(sweep, program, groups, with_scripts=True)
    _submit_groups(d, m, {g.shape: g.indices for g in groups})
    print(f"status: slurm/sweep status {d}")
    return EXIT_OK


def _submit_groups(d: Path, m: dict, by_shape: dict[tuple[int, int], list[int]]) -> None:
    for shape, idx in by_shape.items():
        script = m["scripts"][f"{shape[0]}x{shape[1]}"]
        job = slurm_client.submit(d / script, idx)
        m["attempts"].append(sweep_dir.slurm_attempt(job, idx, script))
        sweep_dir.write_manifest(d, m)
        print(f"submitted {len(idx)} task(s) as job array {job} ({script} --array={slurm_client.array_spec(idx)})")


def _mpiexec(args) -> str:
    exe = args.mpiexec or shutil.which("mpiexec") or ""
    if not exe:
        raise UsageError("mpiexec not found: install MPICH (scripts/bootstrap) or pass --mpiexec PATH")
    return exe


def cmd_run_local(args) -> int:
    mpiexec = _mpiexec(args)
    sweep, program, groups = _prepare(args, query_slurm=False)
    d, m = _materialize(sweep, program, groups, with_scripts=False)
    start = time.time()
    codes = local_runner.run(d, m, [t.index for t in sweep.tasks], mpiexec)
    bad = sum(1 for c in codes.values() if c != 0)
    print(f"ran {len(codes)} task(s) locally in {time.time() - start:.1f} s; {bad} exited non-zero. "
          f"status: slurm/sweep status {d}")
    return EXIT_OK if bad == 0 else EXIT_NOT_OK


def _sweep_folder(target: str) -> Path:
    p = Path(target)
    if p.is_file() and p.suffix == ".toml":
        s = spec.load(p)
        return s.sweep_dir
    if not p.exists():
        raise UsageError(f"'{target}' does not exist; give a sweep folder (results/<name>) or its spec file")
    return p.resolve()


def _print_status(rows: list[task_status.TaskStatus]) -> None:
    w = max(len(r.name) for r in rows)
    print(f"{'#':>4}  {'task':<{w}}  {'state':<9}  {'steps':>9}  {'job':<14}  detail")
    for r in rows:
        print(f"{r.index:>4}  {r.name:<{w}}  {r.state:<9}  {r.steps:>9}  {r.job:<14}  {r.detail}".rstrip())
    print("tasks: " + ", ".join(f"{v} {k}" for k, v in task_status.counts(rows).items()))


def cmd_status(args) -> int:
    d = _sweep_folder(args.sweep)
    m = sweep_dir.read_manifest(d)
    deadline = time.time() + args.wait if args.wait else None
    while True:
        rows = task_status.collect(d, m)
        if deadline is None or not any(r.state in ("running", "pending") for r in rows) or time.time() > deadline:
            break
        time.sleep(2)
        m = sweep_dir.read_manifest(d)
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=1))
    else:
        _print_status(rows)
    if deadline is not None and any(r.state in ("running", "pending") for r in rows):
        print(f"status: tasks still running or pending after --wait {args.wait} s", file=sys.stderr)
    return EXIT_OK if all(r.state == "ok" for r in rows) else EXIT_NOT_OK


def cmd_resubmit(args) -> int:
    d = _sweep_folder(args.sweep)
    m = sweep_dir.read_manifest(d)
    rows = task_status.collect(d, m)
    pick = [r for r in rows if r.needs_rerun(args.include_diverged)]
    if args.tasks:
        names = set(args.tasks)
        unknown = names - {r.name for r in rows}
        if unknown:
            raise UsageError(f"--tasks: no task named {', '.join(sorted(unknown))} in sweep '{m['name']}' (tasks.txt)")
        pick = [r for r in pick if r.name in names]
    if not pick:
        print("nothing to resubmit: " + ", ".join(f"{v} {k}" for k, v in task_status.counts(rows).items()))
        return EXIT_OK
    for r in pick:
        how = f"resumes from {Path(r.checkpoint).name}" if r.resumes else "from step 0"
        print(f"  {r.index:>4}  {r.name}  {r.state}  {r.detail}".rstrip() + f"  -> {how}")
    if args.dry_run:
        print(f"dry run: would {'run' if args.local else 'resubmit'} {len(pick)} task(s)")
        return EXIT_OK
    if not args.local:
        slurm_client.require()
        _ensure_scripts(d, m, [r.index for r in pick])
    mpiexec = _mpiexec(args) if args.local else ""
    for r in pick:
        # Killed and preempted tasks resume from their newest checkpoint (the job script and the local runner take
        # it from checkpoints/<task>/); the others start again, their checkpoints kept aside with their files.
        for line in sweep_dir.supersede(d, r.name, restart=not r.resumes):
            print(f"  kept {line}")
    idx = [r.index for r in pick]
    if args.local:
        codes = local_runner.run(d, m, idx, mpiexec)
        return EXIT_OK if all(c == 0 for c in codes.values()) else EXIT_NOT_OK
    by_shape: dict[tuple[int, int], list[int]] = {}
    tasks = {t["index"]: t for t in m["tasks"]}
    for i in idx:
        by_shape.setdefault((tasks[i]["nodes"], tasks[i]["ranks_per_node"]), []).append(i)
    _submit_groups(d, m, by_shape)
    return EXIT_OK


def _ensure_scripts(d: Path, m: dict, indices: list[int]) -> None:
    """A sweep first run with run-local has no job scripts: write them from its spec, unchanged since."""
    tasks = {t["index"]: t for t in m["tasks"]}
    missing = {(tasks[i]["nodes"], tasks[i]["ranks_per_node"]) for i in indices} - {
        tuple(int(x) for x in k.split("x")) for k in m["scripts"]}
    if not missing:
        return
    sw = spec.load(m["spec"], m["hzpbench"])
    if sw.spec_sha256 != m["spec_sha256"]:
        raise UsageError(f"the spec {m['spec']} changed since this sweep was planned, so its job scripts cannot be "
                         "written from it; restore it or plan a new sweep under another name")
    groups = [g for g in plan.shape_groups(sw, query_slurm=True) if g.shape in missing]
    _write_scripts(sw, m["hzpbench"], groups, d, m)
    sweep_dir.write_manifest(d, m)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="slurm/sweep", description="hzpbench sweeps on Slurm (docs/sweeps.md)")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_spec(p):
        p.add_argument("spec", metavar="SPEC", help="sweep spec (TOML)")
        p.add_argument("--hzpbench", default="", help="hzpbench program (default: sweep.hzpbench, build/bin/hzpbench, PATH)")
        p.add_argument("--out", default="", metavar="DIR",
                       help="folder to hold the sweep's folder DIR/<sweep.name>/ (default: sweep.results_dir)")
        return p

    p = with_spec(sub.add_parser("plan", help="expand and validate every task, print the plan; writes nothing"))
    p.set_defaults(func=cmd_plan)
    p = with_spec(sub.add_parser("submit", help="plan, write results/<sweep>/ (or --out DIR/<sweep>/), submit the job arrays"))
    p.add_argument("--dry-run", action="store_true", help="print the plan and the job scripts, submit nothing")
    p.set_defaults(func=cmd_submit)
    p = with_spec(sub.add_parser("run-local", help="plan, then run every task here one after another (no Slurm)"))
    p.add_argument("--mpiexec", default="", help="MPI launcher (default: mpiexec on PATH)")
    p.set_defaults(func=cmd_run_local)
    p = sub.add_parser("status", help="state of every task (results files and Slurm)")
    p.add_argument("sweep", metavar="SWEEP", help="sweep folder (results/<name>) or spec file")
    p.add_argument("--json", action="store_true", help="one JSON array instead of the table")
    p.add_argument("--wait", type=float, default=0, metavar="S",
                   help="poll until no task is running or pending, at most S seconds")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("resubmit", help="submit again the tasks that failed, were killed or never ran")
    p.add_argument("sweep", metavar="SWEEP", help="sweep folder (results/<name>) or spec file")
    p.add_argument("--local", action="store_true", help="run them here one after another instead of on Slurm")
    p.add_argument("--include-diverged", action="store_true", help="rerun diverged tasks too")
    p.add_argument("--tasks", nargs="+", metavar="TASK", help="only these tasks (of those that need it)")
    p.add_argument("--dry-run", action="store_true", help="list what would be resubmitted")
    p.add_argument("--mpiexec", default="", help="MPI launcher for --local (default: mpiexec on PATH)")
    p.set_defaults(func=cmd_resubmit)
    return ap


def main(argv: list[str] | None = None) -> int:
    # `slurm/sweep status ... | head` should end quietly, as other command-line tools do.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (spec.SpecError, plan.PlanError, UsageError, slurm_client.SlurmError, FileNotFoundError, ValueError) as e:
        msg = str(e)
        first, *rest = msg.splitlines() or [""]
        print(f"sweep: error: {first}", file=sys.stderr)
        for line in rest:
            print(f"sweep: error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
