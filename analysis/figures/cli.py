"""Command line of figures:

    python3 -m analysis.figures results/<sweep> [more folders or .h5 files] [--out FIGDIR]

Writes every figure that the sweep's runs allow into FIGDIR (default: <first folder>/figures), each as
<name>.png with <name>.csv beside it, and says which figures were not drawn and why (e.g. no asynchzp runs
for the shard-granularity heat map). Exit 0, or 1 when some results file could not be read (the figures
are drawn from the others, and the unreadable ones are listed in the runs figure).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..load import Results, load
from . import closure, comm_scaling, exposed, fragmentation, granularity, loss, memory, runs

FIGURES = [runs, closure, loss, memory, fragmentation, exposed, granularity, comm_scaling]


def draw_all(res: Results, out: Path) -> list:
    return [f.make(res, out) for f in FIGURES]


def default_out(paths: list[str]) -> Path:
    first = Path(paths[0])
    return (first if first.is_dir() else first.parent) / "figures"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.figures",
                                 description="Figures (PNG + CSV) of a sweep's results files (docs/analysis.md)")
    ap.add_argument("paths", nargs="+", metavar="PATH", help="sweep folders (results/<sweep>) or .h5 files")
    ap.add_argument("--out", metavar="FIGDIR", help="folder for the figures (default: <first folder>/figures)")
    args = ap.parse_args(argv)
    res = load(args.paths)
    for p in res.problems:
        print(f"figures: {p}", file=sys.stderr)
    if res.runs.empty:
        print("figures: no results files found in " + ", ".join(args.paths), file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else default_out(args.paths)
    for f in draw_all(res, out):
        if f.png:
            print(f"{f.png}  (+ {f.csv.name})")
        else:
            print(f"not drawn: {f.stem}: {f.skipped}")
    return 1 if res.unreadable else 0
