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
import sys
from pathlib import Path

import pandas as pd

from ..load import Results, load
from . import by_config, run_summary, table


def table_of(res: Results) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """collect's per-run table from loaded results (task, status, axes, (repeat), counts, metrics, file), and
    per run the datasets it lacks."""
    summary, missing = run_summary.summarise(res)
    runs = res.runs.set_index("run", drop=False)
    columns = ["task", "status", *res.axes] + (["repeat"] if res.manifests else []) + [
        "world_size", "simulated", "completed_steps", "planned_steps", "measured_steps"]
    for stem in run_summary.STEP_METRICS:
        columns += [f"{stem}_median", f"{stem}_p5", f"{stem}_p95"]
    columns += ["exposed_comm_s_median"] + [f"bytes_{lv}_per_rank_step_median" for lv in res.levels]
    columns += ["mem_peak_bytes_max", "slack_median", "final_loss", "file"]
    out = pd.DataFrame(index=runs.index)
    out["task"] = runs["run"]
    out["status"] = runs["status"]
    for a in res.axes:
        out[a] = runs[a] if a in runs else None
    if res.manifests:
        out["repeat"] = runs["repeat"]
    opened = runs["state"].isin(["unreadable", "never ran"]) == False  # noqa: E712
    out["world_size"] = runs["world_size"].where(opened)
    out["simulated"] = runs["simulated"].where(opened) if "simulated" in runs else None  # 1: hzpbench simulate
    out["completed_steps"] = runs["completed_steps"].where(opened)
    out["planned_steps"] = runs["planned_steps"].where(opened)
    out = out.join(summary)
    out["file"] = runs["file"]
    return out.reindex(columns=columns).reset_index(drop=True), missing


def collect(paths: list[str], axes: list[str] | None = None, err=sys.stderr) -> tuple[list[str], list[dict], int]:
    """Returns (columns, rows as dicts, number of unreadable files); messages go to err."""
    res = load(paths, axes)
    for p in res.problems:
        print(f"collect: {p}", file=err)
    t, missing = table_of(res)
    for run, miss in missing.items():
        if miss and (res.runs.loc[res.runs["run"] == run, "state"] == "ok").all():
            path = res.runs.loc[res.runs["run"] == run, "file"].iloc[0]
            print(f"collect: '{path}' (status ok) lacks dataset(s) {', '.join(sorted(set(miss)))}: "
                  "their columns are empty for it", file=err)
    return list(t.columns), t.to_dict("records"), res.unreadable


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
    t = pd.DataFrame(rows, columns=columns)
    states = collections.Counter(str(s).split(":")[0] for s in t["status"])
    if args.per_config:
        axes = [c for c in columns[2:columns.index("world_size")] if c != "repeat"]
        t = by_config.fold(t, axes)
    written = []
    if args.csv:
        Path(args.csv).write_text(table.to_csv(t))
        written.append(args.csv)
    if args.md:
        Path(args.md).write_text(table.to_markdown(t))
        written.append(args.md)
    if not written:
        sys.stdout.write(table.to_markdown(t))
    print(f"collect: {sum(states.values())} run(s): " + ", ".join(f"{v} {k}" for k, v in states.most_common())
          + (f"; {len(t)} configuration(s)" if args.per_config else "")
          + (f" -> {', '.join(written)}" if written else ""), file=sys.stderr)
    return 1 if bad else 0
