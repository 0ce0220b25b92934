"""Which files to read: the `*.h5` of sweep folders (never `superseded/`) and files named directly, with the
manifests (`sweep.json`, written by slurm/sweep) of the folders that have one, and a message for each
argument that gives nothing to read."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

MANIFEST = "sweep.json"     # docs/sweeps.md


@dataclasses.dataclass
class Inputs:
    files: list[Path]
    manifests: list[dict]       # each with "_dir": the folder it came from
    problems: list[str]


def find(paths: list[str | Path]) -> Inputs:
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
    return Inputs(files, manifests, problems)
