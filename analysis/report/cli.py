"""Command line of report:

    python3 -m analysis.report results/<sweep> [--out REPORTDIR] [--part table1|...|ablation]

Writes REPORTDIR/report.md and REPORTDIR/report.html (default REPORTDIR: <sweep>/report) with every figure
under REPORTDIR/figures: the sweep's header (scale, links, provenance), its configuration axes, the tables,
every figure inline with its caption and CSV, and the runs that did not finish ok. A folder written by
scripts/reproduce also holds reproduce.json (which paper table it reproduces, what this hzpbench can run,
how long it took) and, for Table 1, plans/*.json; --part overrides the table it names.
Exit 0, or 1 when some results file could not be read (the report says which).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..figures.cli import draw_all
from ..load import load
from . import paper_tables, sections
from .blocks import Heading, Text, markdown, page
from .fmt import duration

REPRODUCE = "reproduce.json"    # written by scripts/reproduce


def _reproduce_info(folder: Path) -> dict:
    p = folder / REPRODUCE
    try:
        return json.loads(p.read_text()) if p.is_file() else {}
    except (OSError, json.JSONDecodeError) as e:
        print(f"report: '{p}' is not readable JSON ({e}); reporting without it", file=sys.stderr)
        return {}


def build(folder: Path, out: Path, part: str | None = None) -> tuple[list, int]:
    res = load([folder])
    info = _reproduce_info(folder)
    part = part or info.get("part") or (res.manifests[0].get("name") if res.manifests else None)
    part = part if part in paper_tables.PARTS else None
    name = res.manifests[0].get("name") if res.manifests else folder.name
    title = info.get("title") or (paper_tables.TITLES[part] if part else f"Sweep {name}")
    b: list = [Heading(f"{title} — report of `{name}`", 1)]
    b.append(Text(f"**Scale.** {info.get('scale') or sections.scale_text(res)}"))
    empty = res.runs.empty
    if info.get("scale") and not empty:
        b.append(Text(f"Runs as recorded: {sections.scale_text(res)}"))
    if not empty:
        links = f"{info['links']} " if info.get("links") else ""
        b.append(Text(f"**Links.** {links}{sections.links_text(res)}"))
    if info.get("wall_s") is not None and not empty:
        b.append(Text(f"**Time.** {duration(info['wall_s'])} of wall time for {info.get('runs', '?')} run(s) "
                      f"(estimated beforehand: {duration(info.get('estimate_s', 0))}) on {info.get('machine', '?')}."))
    if empty:
        b.append(Text("No results files in this folder: nothing was run for it."))
    else:
        for p in res.problems:
            b.append(Text(f"**Could not read:** {p}"))
        b += [Heading("Provenance"), sections.provenance(res) if res.attrs else Text("No readable results file.")]
        b += [Heading("Configuration axes"), *sections.axes_block(res)]
    if part:
        ran = res.runs["scheduler.name"].dropna() if "scheduler.name" in res.runs else []
        available = set(info.get("available", [])) | set(ran)
        b += paper_tables.blocks(part, res, folder, available)
    if not res.runs.empty:
        b += [Heading("Tables"), sections.config_table(res), sections.runs_table(res)]
        figures = draw_all(res, out / "figures")
        b += [Heading("Figures"), *sections.figure_blocks(figures, out)]
    if not res.runs.empty:
        b += [Heading("Runs that did not finish ok"), *sections.failed_runs(res)]
    return b, res.unreadable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.report",
                                 description="One Markdown and HTML report of a sweep (docs/analysis.md)")
    ap.add_argument("folder", metavar="DIR", help="the sweep's folder (results/<sweep>)")
    ap.add_argument("--out", metavar="REPORTDIR", help="where report.md, report.html and figures/ go "
                                                      "(default: DIR/report)")
    ap.add_argument("--part", choices=paper_tables.PARTS, help="which paper table the sweep reproduces "
                    "(default: from DIR/reproduce.json or the sweep's name)")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"report: '{folder}' is not a folder; give a sweep's folder (results/<sweep>)", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else folder / "report"
    out.mkdir(parents=True, exist_ok=True)
    blocks, bad = build(folder, out, args.part)
    (out / "report.md").write_text(markdown(blocks))
    (out / "report.html").write_text(page(blocks, blocks[0].text))
    print(f"report: {out / 'report.md'} and {out / 'report.html'}")
    return 1 if bad else 0
