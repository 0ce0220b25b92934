"""`hzpbench plan` output read back: the model-state bytes per rank by component of one planned layout (the
program computes them from the layout alone, so the paper's 9B and 36B shapes at 256 cards plan in
milliseconds). scripts/reproduce saves each plan as `plans/<label>.json` in the sweep folder: the label, the
command line and the program's stdout (`hzpbench plan --json`); this module parses the stdout.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

_MODEL = re.compile(r"^# model .*precision ([\w-]+)")
_HEAD = re.compile(r"^scheduler (\S+), W = (\d+), rank (\d+), N = (\d+) parameters")
_STATE = re.compile(r"^\s+(param|grad|master|m|v|total)\s+(\d+)\s")


class PlanError(Exception):
    pass


def parse(stdout: str) -> list[dict]:
    """One dict per planned scheduler: scheduler, world_size, rank, num_params, precision, and bytes per
    component (of which the closed form depends on the precision: the model's header line gives it). Reads
    `hzpbench plan --json` (what scripts/reproduce saves) and, for folders saved before it, the tables."""
    if stdout.lstrip().startswith("{"):
        doc = json.loads(stdout)
        out = [{"scheduler": p["scheduler"], "world_size": p["world_size"], "rank": p["rank"],
                "num_params": p["params"], "precision": doc["precision"], "bytes": dict(p["state_bytes"]),
                "micro_batches": p.get("micro_batches_per_rank"), "in_flight": p.get("activations_in_flight"),
                "gathered_peak": p.get("gathered_peak_bytes"),
                "activations": dict(p.get("activation_bytes", {}))}
               for p in doc["plans"]]
        if not out:
            raise PlanError("no plan in the JSON plan output (not_plannable: "
                            f"{[r['scheduler'] for r in doc.get('not_plannable', [])]})")
        return out
    out: list[dict] = []
    precision = ""
    for line in stdout.splitlines():
        m = _MODEL.match(line)
        if m:
            precision = m[1]
            continue
        m = _HEAD.match(line)
        if m:
            out.append({"scheduler": m[1], "world_size": int(m[2]), "rank": int(m[3]), "num_params": int(m[4]),
                        "precision": precision, "bytes": {}})
            continue
        m = _STATE.match(line)
        if m and out:
            out[-1]["bytes"][m[1]] = int(m[2])
    if not out:
        raise PlanError("no 'scheduler ..., W = ..., N = ... parameters' line in the plan output")
    return out


def read_saved(folder: Path) -> list[dict]:
    """Every plans/*.json of a sweep folder, parsed, in file-name order; each keeps label, argv and config, and
    memory_row (the paper's Table 2 row it stands for, or None) and state_table (whether Table 1 lists it)."""
    plans = []
    for p in sorted((folder / "plans").glob("*.json")):
        saved = json.loads(p.read_text())
        for planned in parse(saved["stdout"]):
            plans.append({**planned, "label": saved["label"], "argv": saved["argv"],
                          "config": saved.get("config", {}), "file": p.name,
                          "memory_row": saved.get("memory_row"), "state_table": saved.get("state_table", True)})
    return plans
