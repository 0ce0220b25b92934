"""Command line of collect:

    python3 -m analysis.collect results/<sweep> [more folders or .h5 files] [--csv out.csv] [--md out.md]
                                [--per-config] [--axes k1,k2]

One row per results file (and per task of the sweep's manifest that has none), nothing dropped: failed,
diverged and killed runs are rows with their status; a file that cannot be read is a row whose status
says why, with the same message on stderr. Without --csv/--md the Markdown table goes to stdout.
Exit code 0 when every file was read, 1 when some could not be (the tables are written all the same),
2 for bad arguments.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from . import by_config, run_summary, table
from .results_file import ResultsFileError, Run, open_run

# Config keys that differ between runs without being a sweep axis.
NOT_AXES = {"output.path"}
MANIFEST = "sweep.json"     # written by slurm/sweep (docs/sweeps.md)


def _inputs(paths: list[str]) -> tuple[list[Path], list[dict], list[str]]:
    """Files to read, the manifests of sweep folders, and problems with the arguments."""
    files: list[Path] = []
    manifests: list[dict] = []
    problems: list[str] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.h5"))
            mf = p / MANIFEST
            if mf.is_file():
                try:
                    m = json.loads(mf.read_text())
                    m["_dir"] = p
                    manifests.append(m)
                except (json.JSONDecodeError, OSError) as e:
                    problems.append(f"'{mf}' is not a readable sweep manifest ({e}); reading the folder's .h5 files only")
            if not found and not mf.is_file():
                problems.append(f"'{p}' holds no .h5 results files")
            files += found
        else:
            files.append(p)   # open_run says what is wrong with it, if anything
    return files, manifests, problems


def _axes(runs: list[Run], manifests: list[dict]) -> list[str]:
    if manifests:
        out: list[str] = []
        for m in manifests:
            out += [a for a in m.get("axes", []) if a not in out]
        return out
    keys: dict[str, set] = collections.defaultdict(set)
    for r in runs:
        for k, v in r.config.items():
            keys[k].add(repr(v))
    all_keys = set().union(*(r.config.keys() for r in runs)) if runs else set()
    return sorted(k for k in all_keys if k not in NOT_AXES and
                  (len(keys[k]) > 1 or any(k not in r.config for r in runs)))


def collect(paths: list[str], axes: list[str] | None = None, err=sys.stderr) -> tuple[list[str], list[dict], int]:
    """Returns (columns, rows, number of unreadable files)."""
    files, manifests, problems = _inputs(paths)
    for p in problems:
        print(f"collect: {p}", file=err)
    runs: list[Run] = []
    rows_by_file: dict[Path, dict] = {}
    versions: dict[str, list[Path]] = collections.defaultdict(list)
    bad = 0
    for f in files:
        try:
            run = open_run(f)
        except ResultsFileError as e:
            bad += 1
            print(f"collect: {e}", file=err)
            rows_by_file[f.resolve()] = {"task": f.stem, "file": str(f), "status": f"unreadable: {e}"}
            v = getattr(e, "schema_version", None)
            versions["unreadable" if v is None else str(v)].append(f)
            continue
        runs.append(run)
        versions[str(run.schema_version)].append(f)
        rows_by_file[f.resolve()] = {"task": f.stem, "file": str(f), "_run": run}
    numbered = {k: v for k, v in versions.items() if k != "unreadable"}
    if len(numbered) > 1:
        print("collect: the inputs mix schema versions: " + "; ".join(
            f"{k} ({len(v)} file(s), e.g. {v[0].name})" for k, v in sorted(numbered.items()))
            + ". Files of a version collect does not read are listed as unreadable", file=err)

    axes = axes if axes is not None else _axes(runs, manifests)
    levels = sorted(set().union(*(run_summary.comm_levels(r) for r in runs))) if runs else []

    # Manifest order first (with tasks that have no file), then any other files by name.
    ordered: list[dict] = []
    seen: set[Path] = set()
    for m in manifests:
        for t in m.get("tasks", []):
            f = (m["_dir"] / f"{t['name']}.h5").resolve()
            row = rows_by_file.get(f) or {"task": t["name"], "file": str(m["_dir"] / f"{t['name']}.h5"),
                                          "status": "no results file (never ran; see slurm/sweep status)"}
            row["_task"] = t
            ordered.append(row)
            seen.add(f)
    ordered += [r for f, r in rows_by_file.items() if f not in seen]

    for row in ordered:
        run: Run | None = row.pop("_run", None)
        task = row.pop("_task", None)
        for a in axes:
            if task is not None and a in task.get("values", {}):
                row[a] = task["values"][a]
            elif run is not None:
                row[a] = run.config.get(a)
        if task is not None:
            row["repeat"] = task.get("repeat")
        if run is None:
            continue
        row["status"] = run_summary.status_text(run)
        row["world_size"] = int(run.attrs["world_size"])
        row["planned_steps"] = run.config.get("train.steps")
        row.update(run_summary.summarise(run, levels))
        if run.missing and run.status == "ok":
            print(f"collect: '{run.path}' (status ok) lacks dataset(s) {', '.join(sorted(set(run.missing)))}: "
                  "their columns are empty for it", file=err)

    columns = ["task", "status", *axes] + (["repeat"] if manifests else []) + [
        "world_size", "completed_steps", "planned_steps", "measured_steps"]
    for stem in run_summary.STEP_METRICS:
        columns += [f"{stem}_median", f"{stem}_p5", f"{stem}_p95"]
    columns += ["exposed_comm_s_median"] + [f"bytes_{l}_per_rank_step_median" for l in levels]
    columns += ["mem_peak_bytes_max", "slack_median", "final_loss", "file"]
    return columns, ordered, bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.collect",
                                 description="Every results file of a sweep into one table (docs/sweeps.md)")
    ap.add_argument("paths", nargs="+", metavar="PATH", help="sweep folders (results/<sweep>) or .h5 files")
    ap.add_argument("--csv", metavar="FILE", help="write the table as CSV")
    ap.add_argument("--md", metavar="FILE", help="write the table as Markdown")
    ap.add_argument("--per-config", action="store_true",
                    help="one row per configuration instead of per run: medians over its ok runs, spread across "
                         "repeats, and how every run ended")
    ap.add_argument("--axes", metavar="KEYS", help="comma-separated config keys to show as columns "
                    "(default: the sweep's axes from its manifest, else the keys that differ between files)")
    args = ap.parse_args(argv)
    columns, rows, bad = collect(args.paths, args.axes.split(",") if args.axes else None)
    if not rows:
        print("collect: no results files found in " + ", ".join(args.paths), file=sys.stderr)
        return 1
    states = collections.Counter(str(r.get("status", "?")).split(":")[0] for r in rows)
    if args.per_config:
        axes = [c for c in columns[2:columns.index("world_size")] if c != "repeat"]
        columns, rows = by_config.fold(columns, rows, axes)
    written = []
    if args.csv:
        Path(args.csv).write_text(table.to_csv(columns, rows))
        written.append(args.csv)
    if args.md:
        Path(args.md).write_text(table.to_markdown(columns, rows))
        written.append(args.md)
    if not written:
        sys.stdout.write(table.to_markdown(columns, rows))
    print(f"collect: {sum(states.values())} run(s): " + ", ".join(f"{v} {k}" for k, v in states.most_common())
          + (f"; {len(rows)} configuration(s)" if args.per_config else "")
        + (f" -> {', '.join(written)}" if written else ""), file=sys.stderr)
    return 1 if bad else 0

