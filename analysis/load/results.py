"""The one loader the table, figure and report commands share: results files (sweep folders, with their
manifests, or single files) into pandas frames.

- `runs`: one row per results file, and per task of a manifest that has none; nothing dropped. Columns:
  `run` (the file's stem, the sweep's task name), `file`, `state` (ok, diverged, failed, killed, running,
  unreadable, never ran; killed = left at `running`, or `failed: ...: terminated by SIG...`), `status` (the file's full text, or why it could not be read), `reason` (of a
  failure), `world_size`, `completed_steps`, `planned_steps`, `warmup_steps`, `repeat`, `layout`, `config`
  (the label of the configuration: layout and swept values), `num_params`, then every configuration key
  (dotted, as `hzpbench list` names them) with the task's axis values where a manifest gives them.
- `long`: one row per run × step × rank: `run`, `step`, `rank`, `measured`, `state`, every series under
  its dataset path, and the configuration keys.
- `memory`: one row per run × rank × model-state component (`memory/model_state_bytes`).
Root attributes of each run stay in `attrs[run]`.
"""
from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import pandas as pd

from . import frames, inputs, labels
from .results_file import ResultsFileError, Run, open_run

# Config keys that differ between runs without being a sweep axis.
NOT_AXES = {"output.path"}


@dataclasses.dataclass
class Results:
    runs: pd.DataFrame
    long: pd.DataFrame
    memory: pd.DataFrame
    axes: list[str]
    attrs: dict[str, dict]
    datasets: dict[str, set[str]]     # run -> series it has
    manifests: list[dict]
    problems: list[str]               # one message each: arguments, unreadable files, mixed versions
    unreadable: int
    levels: list[str]                 # link levels seen in comm/*/<level>/bytes
    config_keys: list[str]
    show_world: bool = False          # runs differ in world size: labels say W
    usual: dict | None = None         # without a manifest: axis -> the value most runs have (labels.py)

    def ok(self) -> pd.DataFrame:
        return self.runs[self.runs["state"] == "ok"]

    def label(self, meta: pd.Series, without: tuple[str, ...] = ()) -> str:
        """A run's configuration label without some axes: the name of a line whose x axis they are."""
        cfg = {k: labels.plain(v) for k, v in meta.items()}
        axes = [a for a in self.axes if a not in without]
        return labels.config_label(cfg, int(meta["world_size"] or 1), axes, self.show_world, self.usual)


def state_of(run: Run) -> str:
    if run.killed:
        return "killed"      # or still being written: files cannot show jobs (slurm/sweep status can)
    s = run.status
    if s.startswith("failed") and "terminated by SIG" in s:
        # The run caught SIGTERM/SIGINT/SIGUSR1 (a time limit, scancel, preemption) and wrote its steps:
        # stopped from outside, as slurm/sweep status counts it, not a failure of its own.
        return "killed"
    if s.startswith("failed"):
        return "failed"
    return s


def status_text(run: Run) -> str:
    return "killed" if run.killed else run.status


def _reason(status: str) -> str:
    # "failed: <rank>: <reason>"
    parts = status.split(": ", 2)
    return parts[2] if status.startswith("failed") and len(parts) == 3 else ""


def _auto_axes(opened: list[Run]) -> list[str]:
    keys: dict[str, set] = collections.defaultdict(set)
    for r in opened:
        for k, v in r.config.items():
            keys[k].add(repr(v))
    all_keys = set().union(*(r.config.keys() for r in opened)) if opened else set()
    return sorted(k for k in all_keys if k not in NOT_AXES and
                  (len(keys[k]) > 1 or any(k not in r.config for r in opened)))


def _hashable(value):
    """A configuration value as a table cell: list values (int and string lists such as scheduler.pp_layers) as
    they are typed after --set, comma-separated, so that columns can be grouped and stored as categories."""
    if isinstance(value, (list, tuple)) or (hasattr(value, "ndim") and getattr(value, "ndim", 0) > 0):
        return ",".join(str(x) for x in value)
    return value


def load(paths: list[str | Path], axes: list[str] | None = None) -> Results:
    found = inputs.find(paths)
    problems = list(found.problems)
    opened: dict[Path, Run] = {}
    failures: dict[Path, str] = {}
    versions: dict[str, list[Path]] = collections.defaultdict(list)
    for f in found.files:
        try:
            run = open_run(f)
        except ResultsFileError as e:
            failures[f.resolve()] = str(e)
            problems.append(str(e))
            v = getattr(e, "schema_version", None)
            versions["unreadable" if v is None else str(v)].append(f)
            continue
        opened[f.resolve()] = run
        versions[str(run.schema_version)].append(f)
    numbered = {k: v for k, v in versions.items() if k != "unreadable"}
    if len(numbered) > 1:
        problems.append("the inputs mix schema versions: " + "; ".join(
            f"{k} ({len(v)} file(s), e.g. {v[0].name})" for k, v in sorted(numbered.items()))
            + ". Files of a version analysis does not read are listed as unreadable")

    if axes is None:
        if found.manifests:
            axes = []
            for m in found.manifests:
                axes += [a for a in m.get("axes", []) if a not in axes]
        else:
            axes = _auto_axes(list(opened.values()))

    # Manifest order first (with tasks that have no file), then any other files by name.
    entries: list[tuple[Path, dict | None]] = []
    seen: set[Path] = set()
    for m in found.manifests:
        for t in m.get("tasks", []):
            f = m["_dir"] / f"{t['name']}.h5"
            entries.append((f, t))
            seen.add(f.resolve())
    entries += [(f, None) for f in found.files if f.resolve() not in seen]

    names = collections.Counter(f.stem for f, _ in entries)
    rows, longs, mems = [], [], []
    attrs: dict[str, dict] = {}
    datasets: dict[str, set[str]] = {}
    config_keys: list[str] = []
    for f, task in entries:
        name = f.stem if names[f.stem] == 1 else f"{f.parent.name}/{f.stem}"
        run = opened.get(f.resolve())
        row: dict = {"run": name, "file": str(f), "repeat": task.get("repeat") if task else None}
        cfg: dict = {}
        if run is not None:
            cfg.update(run.config)
        if task is not None:
            cfg.update(task.get("values", {}))
        for k in cfg:
            if k not in config_keys:
                config_keys.append(k)
        if run is None:
            why = failures.get(f.resolve())
            row.update(state="unreadable" if why else "never ran",
                       status=f"unreadable: {why}" if why else "no results file (never ran; see slurm/sweep status)",
                       reason=why or "", world_size=int(task.get("world_size", 0)) if task else None,
                       completed_steps=0)
        else:
            world = int(run.attrs["world_size"])
            row.update(state=state_of(run), status=status_text(run), reason=_reason(run.status), world_size=world,
                       completed_steps=run.completed_steps, warmup_steps=frames.warmup_steps(run),
                       num_params=run.attrs.get("model.num_params"),
                       simulated=int(run.attrs.get("simulated", 0)))  # hzpbench simulate's files (docs/simulate.md)
            attrs[name] = run.attrs
            datasets[name] = set(run.series)
            lr = frames.long_rows(run, world)
            lr.insert(0, "run", name)
            longs.append(lr)
            mr = frames.memory_rows(run)
            mr.insert(0, "run", name)
            mems.append(mr)
        row["planned_steps"] = cfg.get("train.steps")
        row["_cfg"] = cfg
        rows.append(row)

    show_world = len({r["world_size"] for r in rows if r["world_size"]}) > 1
    usual = None if found.manifests else {
        a: collections.Counter(repr(r["_cfg"].get(a)) for r in rows if a in r["_cfg"]).most_common(1)[0][0]
        for a in axes if any(a in r["_cfg"] for r in rows)}
    for r in rows:
        cfg = r.pop("_cfg")
        world = r["world_size"] or 1
        r["layout"] = labels.layout(cfg, world) if cfg else "?"
        r["config"] = labels.config_label(cfg, world, axes, show_world, usual) if cfg else r["run"]
        for k in config_keys:
            r[k] = _hashable(cfg.get(k))
    runs = pd.DataFrame(rows)
    if runs.empty:
        runs = pd.DataFrame(columns=["run", "file", "state", "status", "reason", "world_size", "completed_steps",
                                     "planned_steps", "warmup_steps", "repeat", "layout", "config", "num_params",
                                     "simulated"])

    long = pd.concat(longs, ignore_index=True) if longs else pd.DataFrame(columns=["run", "step", "rank", "measured"])
    if not long.empty:
        keep = ["run", "state", "layout", "config", *config_keys]
        long = long.merge(runs[keep], on="run", how="left", sort=False)
        for k in ["state", "layout", "config", *config_keys]:
            if not pd.api.types.is_numeric_dtype(long[k]) and not pd.api.types.is_bool_dtype(long[k]):
                long[k] = long[k].astype("category")   # repeated on every row: stored once per value
    memory = pd.concat(mems, ignore_index=True) if mems else pd.DataFrame(columns=["run", "rank", "component", "bytes"])
    levels = sorted({n.split("/")[2] for ds in datasets.values() for n in ds
                     if n.startswith("comm/") and n.endswith("/bytes") and n.count("/") == 3})
    return Results(runs, long, memory, list(axes), attrs, datasets, found.manifests, problems, len(failures),
                   levels, config_keys, show_world, usual)
