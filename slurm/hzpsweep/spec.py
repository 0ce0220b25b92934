"""A sweep spec (TOML) read, checked and expanded into tasks: one resolved configuration per task.

The spec's format is documented in docs/sweeps.md. Every problem is one SpecError whose message names the
field, the value and the fix; hzpbench's own keys are checked later by `hzpbench validate` (validate.py),
so this module knows nothing of them beyond "a key has a dot in it".
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import re
import tomllib
from pathlib import Path
from typing import Any

# Slurm resources a spec may set in [sweep] or sweep over in [axes]; every other axis is an hzpbench key.
RESOURCE_AXES = ("nodes", "ranks_per_node")

SWEEP_FIELDS = {
    "name": "the sweep's name: its results go to <results_dir>/<name>/",
    "results_dir": "folder holding one folder per sweep (default 'results', relative to the current directory)",
    "base_config": "an hzpbench config file every task starts from (relative to the spec)",
    "repeats": "runs of every configuration (default 1)",
    "nodes": "nodes per task (default 1)",
    "ranks_per_node": "MPI ranks per node (default 1)",
    "gpus_per_node": "GPUs per node requested from Slurm (default 0)",
    "cpus_per_task": "CPUs per rank (default 1); OpenBLAS gets as many threads",
    "time_per_task": "Slurm time limit of one task, 'MM', 'HH:MM:SS' or 'D-HH:MM:SS' (optional)",
    "launcher": "'srun' (srun --mpi=pmi2, default) or 'mpiexec' inside the allocation",
    "overcommit": "'auto' (default: when a node has fewer CPUs than ranks x cpus_per_task), true or false",
    "partition": "Slurm partition (default: the cluster's default)",
    "account": "Slurm account (optional)",
    "sbatch_args": "extra sbatch arguments, verbatim, e.g. ['--qos=high']",
    "hzpbench": "path of the hzpbench program (default: build/bin/hzpbench of this checkout, else PATH)",
    "env": "table of environment variables set in every task (NCCL_*, UCX_*, ...)",
    "requeue": "true (default): a task signalled by Slurm checkpoints, is requeued and resumes; false: it just stops",
    "signal_grace": "seconds before the time limit at which Slurm sends SIGUSR1 (--signal=USR1@N; default 90)",
    "checkpoint_every": "steps between periodic checkpoints of a task (default 0: only on a signal), which resubmit "
                        "resumes a killed task from",
}
# What a requeued task needs from hzpbench (docs/checkpoints.md): a checkpoint when the signal stops it.
SIGNAL_CHECKPOINT_KEY = "output.checkpoint_on_signal"
DEFAULT_SIGNAL_GRACE_S = 90
MAX_SIGNAL_GRACE_S = 65535   # Slurm's --signal takes at most this many seconds
TOP_LEVEL = ("sweep", "base", "axes", "exclude")
LAUNCHERS = ("srun", "mpiexec")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpecError(Exception):
    """A spec problem; the message is one line naming field, value and fix."""


@dataclasses.dataclass
class Task:
    index: int                  # position in the sweep's task list = its Slurm array index
    name: str                   # file stem: results/<sweep>/<name>.h5
    repeat: int
    values: dict[str, Any]      # axis -> value (resource axes included)
    nodes: int
    ranks_per_node: int
    config: dict[str, Any]      # flat hzpbench keys -> values, base then axes

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def shape(self) -> tuple[int, int]:
        return (self.nodes, self.ranks_per_node)


@dataclasses.dataclass
class Sweep:
    spec_path: Path
    spec_sha256: str
    name: str
    results_dir: Path
    repeats: int
    gpus_per_node: int
    cpus_per_task: int
    time_per_task_s: int | None
    launcher: str
    overcommit: str             # "auto", "true", "false"
    partition: str
    account: str
    sbatch_args: list[str]
    hzpbench: str
    env: dict[str, str]
    requeue: bool
    signal_grace_s: int
    checkpoint_every: int
    base: dict[str, Any]
    axes: dict[str, list[Any]]
    excluded: int
    tasks: list[Task]

    @property
    def sweep_dir(self) -> Path:
        return self.results_dir / self.name


def _fmt(v: Any) -> str:
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _suggest(word: str, options) -> str:
    m = difflib.get_close_matches(word, list(options), n=1)
    return f"did you mean '{m[0]}'? " if m else ""


def flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    """Nested tables to dotted keys, as hzpbench reads a config file: [model] preset = x is model.preset."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def parse_duration(field: str, v: Any) -> int:
    """Slurm's time formats (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) to seconds."""
    fix = "write minutes (30) or 'HH:MM:SS' ('01:30:00') or 'D-HH:MM:SS'"
    if isinstance(v, bool):
        raise SpecError(f"{field} = {_fmt(v)} is not a duration; {fix}")
    if isinstance(v, int):
        if v <= 0:
            raise SpecError(f"{field} = {v} must be positive; {fix}")
        return v * 60
    if not isinstance(v, str):
        raise SpecError(f"{field} = {_fmt(v)} is not a duration; {fix}")
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", v.strip())
    if not m:
        raise SpecError(f"{field} = {_fmt(v)} is not a Slurm duration; {fix}")
    d, a, b, c = m.groups()
    if d is not None:       # D-HH[:MM[:SS]]
        s = int(d) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:     # HH:MM:SS
        s = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:     # MM:SS
        s = int(a) * 60 + int(b)
    else:                   # MM
        s = int(a) * 60
    if s <= 0:
        raise SpecError(f"{field} = {_fmt(v)} must be positive; {fix}")
    return s


def slurm_time(seconds: int) -> str:
    d, r = divmod(seconds, 86400)
    h, r = divmod(r, 3600)
    m, s = divmod(r, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def _positive_int(field: str, v: Any, minimum: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise SpecError(f"{field} = {_fmt(v)} must be an integer >= {minimum}; e.g. {field.split('.')[-1]} = {max(minimum, 1)}")
    return v


def _value_label(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "+".join(_value_label(x) for x in v)
    return re.sub(r"[^A-Za-z0-9.+-]", "_", str(v))


def _axis_labels(axes: list[str]) -> dict[str, str]:
    """Short labels for task names: the key's last segment, the whole key where two would collide."""
    last = [a.rsplit(".", 1)[-1] for a in axes]
    return {a: (l if last.count(l) == 1 else a) for a, l in zip(axes, last)}


def task_name(labels: dict[str, str], values: dict[str, Any], repeat: int, repeats: int) -> str:
    parts = [f"{labels[a]}-{_value_label(v)}" for a, v in values.items()]
    if repeats > 1 or not parts:
        parts.append(f"r{repeat}")
    return "_".join(parts)


def load(spec_path: str | Path, default_hzpbench: str = "") -> Sweep:
    path = Path(spec_path)
    where = f"spec {path}"
    if not path.is_file():
        raise SpecError(f"{where} does not exist" if not path.exists() else f"{where} is not a file")
    raw_bytes = path.read_bytes()
    try:
        doc = tomllib.loads(raw_bytes.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecError(f"{where} is not valid TOML: {e}; fix the syntax at that line") from None

    for k in doc:
        if k not in TOP_LEVEL:
            raise SpecError(f"{where}: unknown table [{k}]; {_suggest(k, TOP_LEVEL)}a spec has [sweep], [base], [axes] and [[exclude]]")
    sw = doc.get("sweep")
    if not isinstance(sw, dict):
        raise SpecError(f"{where}: no [sweep] table; add [sweep] with at least name = \"my-sweep\"")
    for k in sw:
        if k not in SWEEP_FIELDS:
            raise SpecError(f"{where}: unknown field sweep.{k}; {_suggest(k, SWEEP_FIELDS)}known fields: {', '.join(SWEEP_FIELDS)}")

    name = sw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SpecError(f"{where}: sweep.name = {_fmt(name) if name is not None else '(missing)'} must be a folder name "
                        "of letters, digits, '_', '.', '-'; e.g. name = \"zero-ablation\"")

    def field(k, default):
        return sw.get(k, default)

    results_dir = field("results_dir", "results")
    if not isinstance(results_dir, str) or not results_dir:
        raise SpecError(f"{where}: sweep.results_dir = {_fmt(results_dir)} must be a folder path; e.g. results_dir = \"results\"")
    repeats = _positive_int("sweep.repeats", field("repeats", 1))
    gpus = _positive_int("sweep.gpus_per_node", field("gpus_per_node", 0), 0)
    cpus = _positive_int("sweep.cpus_per_task", field("cpus_per_task", 1))
    t = field("time_per_task", None)
    time_s = parse_duration("sweep.time_per_task", t) if t is not None else None
    launcher = field("launcher", "srun")
    if launcher not in LAUNCHERS:
        raise SpecError(f"{where}: sweep.launcher = {_fmt(launcher)} is not a launcher; use 'srun' or 'mpiexec'")
    oc = field("overcommit", "auto")
    if oc not in ("auto", True, False):
        raise SpecError(f"{where}: sweep.overcommit = {_fmt(oc)}; use \"auto\", true or false")
    overcommit = oc if isinstance(oc, str) else ("true" if oc else "false")
    strings = {}
    for k in ("partition", "account", "hzpbench"):
        v = field(k, "")
        if not isinstance(v, str):
            raise SpecError(f"{where}: sweep.{k} = {_fmt(v)} must be a string")
        strings[k] = v
    sargs = field("sbatch_args", [])
    if not isinstance(sargs, list) or not all(isinstance(a, str) for a in sargs):
        raise SpecError(f"{where}: sweep.sbatch_args = {_fmt(sargs)} must be a list of strings, e.g. [\"--qos=high\"]")
    env = field("env", {})
    if not isinstance(env, dict):
        raise SpecError(f"{where}: sweep.env must be a table, e.g. [sweep.env] then NCCL_DEBUG = \"WARN\"")
    env_out = {}
    for k, v in env.items():
        if not ENV_RE.match(k) or isinstance(v, (dict, list)):
            raise SpecError(f"{where}: sweep.env.{k} = {_fmt(v)}: names are [A-Za-z_][A-Za-z0-9_]* and values scalars")
        env_out[k] = _fmt(v).strip("'") if not isinstance(v, str) else v

    # --- base: a config file (optional) under the inline keys ---
    base: dict[str, Any] = {}
    bc = field("base_config", None)
    if bc is not None:
        if not isinstance(bc, str):
            raise SpecError(f"{where}: sweep.base_config = {_fmt(bc)} must be a path to an hzpbench config file")
        bcp = (path.parent / bc) if not Path(bc).is_absolute() else Path(bc)
        if not bcp.is_file():
            raise SpecError(f"{where}: sweep.base_config = {_fmt(bc)}: '{bcp}' does not exist; the path is relative to the spec")
        try:
            base.update(flatten(tomllib.loads(bcp.read_text())))
        except tomllib.TOMLDecodeError as e:
            raise SpecError(f"{where}: sweep.base_config '{bcp}' is not valid TOML: {e}") from None
    inline = doc.get("base", {})
    if not isinstance(inline, dict):
        raise SpecError(f"{where}: base must be a table of hzpbench keys, e.g. [base] then model.preset = \"tiny\"")
    base.update(flatten(inline))
    for k in base:
        _check_config_key(where, "base", k)

    # --- preemption: Slurm's signal, a checkpoint, a requeue, a resume (docs/sweeps.md) ---
    requeue = field("requeue", True)
    if not isinstance(requeue, bool):
        raise SpecError(f"{where}: sweep.requeue = {_fmt(requeue)} must be true or false")
    grace = field("signal_grace", DEFAULT_SIGNAL_GRACE_S)
    if isinstance(grace, bool) or not isinstance(grace, int) or not 1 <= grace <= MAX_SIGNAL_GRACE_S:
        raise SpecError(f"{where}: sweep.signal_grace = {_fmt(grace)} must be whole seconds from 1 to "
                        f"{MAX_SIGNAL_GRACE_S}; e.g. signal_grace = {DEFAULT_SIGNAL_GRACE_S}")
    if time_s is not None and requeue and grace >= time_s:
        raise SpecError(f"{where}: sweep.signal_grace = {grace} s is not shorter than sweep.time_per_task "
                        f"({time_s} s): Slurm would signal before the task starts; give a smaller signal_grace")
    ckpt_every = _positive_int("sweep.checkpoint_every", field("checkpoint_every", 0), 0)

    # --- axes ---
    axes_raw = doc.get("axes", {})
    if not isinstance(axes_raw, dict):
        raise SpecError(f"{where}: axes must be a table, e.g. [axes] then \"scheduler.name\" = [\"zero1\", \"zero3\"]")
    axes = flatten(axes_raw)
    for k, vals in axes.items():
        if not isinstance(vals, list) or not vals:
            raise SpecError(f"{where}: axes.'{k}' = {_fmt(vals)} is not a non-empty list; write [{_fmt(vals)}] or [a, b]")
        if k in RESOURCE_AXES:
            for v in vals:
                _positive_int(f"axes.{k}", v)
        else:
            _check_config_key(where, "axes", k)
        if len({repr(v) for v in vals}) != len(vals):
            raise SpecError(f"{where}: axes.'{k}' = {_fmt(vals)} repeats a value; list each value once (use sweep.repeats for repeats)")
        for r in RESOURCE_AXES:
            if k == r and r in sw:
                raise SpecError(f"{where}: '{r}' is both sweep.{r} = {sw[r]} and an axis; keep one of them")

    defaults = {r: _positive_int(f"sweep.{r}", field(r, 1)) for r in RESOURCE_AXES}

    # --- exclusions: each a partial assignment of axis values ---
    excl_raw = doc.get("exclude", [])
    if not isinstance(excl_raw, list):
        raise SpecError(f"{where}: exclude must be an array of tables: [[exclude]] then \"scheduler.name\" = \"ddp\"")
    exclusions = []
    for i, e in enumerate(excl_raw):
        if not isinstance(e, dict) or not e:
            raise SpecError(f"{where}: exclude[{i}] is empty; give axis = value pairs a task must all match to be left out")
        e = flatten(e)
        for k, v in e.items():
            if k not in axes:
                raise SpecError(f"{where}: exclude[{i}]: '{k}' is not an axis; {_suggest(k, axes)}exclusions name axes: {', '.join(axes) or '(none)'}")
            if not any(_same(v, a) for a in axes[k]):
                raise SpecError(f"{where}: exclude[{i}]: '{k}' = {_fmt(v)} is not among the axis values {_fmt(axes[k])}; "
                                "an exclusion that matches nothing is a typo")
        exclusions.append(e)

    # --- expansion ---
    keys = list(axes)
    labels = _axis_labels(keys)
    tasks: list[Task] = []
    excluded = 0
    names: dict[str, dict] = {}
    for combo in itertools.product(*(axes[k] for k in keys)):
        values = dict(zip(keys, combo))
        if any(all(_same(values[k], v) for k, v in e.items()) for e in exclusions):
            excluded += 1
            continue
        config = dict(base)
        for k, v in values.items():
            if k not in RESOURCE_AXES:
                config[k] = v
        nodes = values.get("nodes", defaults["nodes"])
        rpn = values.get("ranks_per_node", defaults["ranks_per_node"])
        config["topology.world_size"] = nodes * rpn
        if requeue:
            _preemption_keys(where, config, ckpt_every)
        for rep in range(repeats):
            n = task_name(labels, values, rep, repeats)
            if n in names:
                raise SpecError(f"{where}: axis values {values} and {names[n]} both make task name '{n}'; "
                                "make the values differ in letters or digits")
            names[n] = values
            tasks.append(Task(len(tasks), n, rep, values, nodes, rpn, config))
    if not tasks:
        raise SpecError(f"{where}: every combination of the axes is excluded ({excluded}); remove an [[exclude]] entry")

    return Sweep(spec_path=path.resolve(), spec_sha256=hashlib.sha256(raw_bytes).hexdigest(), name=name,
                 results_dir=Path(results_dir).resolve(), repeats=repeats, gpus_per_node=gpus, cpus_per_task=cpus,
                 time_per_task_s=time_s, launcher=launcher, overcommit=overcommit, partition=strings["partition"],
                 account=strings["account"], sbatch_args=sargs, hzpbench=strings["hzpbench"] or default_hzpbench,
                 env=env_out, requeue=requeue, signal_grace_s=grace, checkpoint_every=ckpt_every, base=base, axes=axes, excluded=excluded, tasks=tasks)


def _same(a: Any, b: Any) -> bool:
    # TOML ints and floats compare by value (2 == 2.0), but a bool is not the integer 1.
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool)
        and not isinstance(b, bool) and a == b)


def _preemption_keys(where: str, config: dict[str, Any], ckpt_every: int) -> None:
    """A requeued task must checkpoint when Slurm's signal stops it; periodic checkpoints on request."""
    if config.get(SIGNAL_CHECKPOINT_KEY, True) is not True:
        raise SpecError(f"{where}: '{SIGNAL_CHECKPOINT_KEY}' = {_fmt(config[SIGNAL_CHECKPOINT_KEY])} with "
                        "sweep.requeue = true: a signalled task would stop without a checkpoint to resume; remove the "
                        "key, or set sweep.requeue = false")
    config[SIGNAL_CHECKPOINT_KEY] = True
    if ckpt_every > 0:
        config.setdefault("output.checkpoint_every", ckpt_every)


def _check_config_key(where: str, table: str, k: str) -> None:
    if k == "topology.world_size":
        raise SpecError(f"{where}: {table}.'topology.world_size' is set by the sweep (nodes x ranks_per_node); "
                        "set sweep.nodes and sweep.ranks_per_node, or sweep over them in [axes]")
    if k == "output.checkpoint_dir":
        raise SpecError(f"{where}: {table}.'output.checkpoint_dir' is set by the sweep (checkpoints/<task>/ in the "
                        "sweep's folder, where a requeued or resubmitted task finds them); remove the key")
    if "." not in k:
        hint = "a resource axis ('nodes', 'ranks_per_node')" if table == "axes" else "an hzpbench key"
        raise SpecError(f"{where}: {table}.'{k}' is neither {hint} nor a group.key name; "
                        f"{_suggest(k, RESOURCE_AXES) if table == 'axes' else ''}hzpbench keys look like 'scheduler.name' (hzpbench list)")
