"""Opening one hzpbench results file for analysis: the checks `hzpbench inspect` makes (docs/results-schema.md,
"Reading"), in Python, each failing with one message that names the file and the fix, and the layout of
each schema version this reader knows.

Files are opened without HDF5's file lock, so the file of a live run can be read (it shows the last flush).
"""
from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import h5py
import numpy as np

# Schema versions this reader knows (docs/results-schema.md "Versioning"); a bump adds its reader here.
KNOWN_SCHEMA_VERSIONS = (1, 2)   # 2: `preempted`, first_step (docs/results-schema.md)
REQUIRED_ATTRIBUTES = ("schema_version", "hzpbench_version", "git_sha", "git_dirty", "build_options", "argv",
                       "config", "world_size", "topology", "backend", "cpu_model", "gpu_model", "start_time",
                       "end_time", "status")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class ResultsFileError(Exception):
    """A file that cannot be read as an hzpbench results file; the message is one line. schema_version is
    the file's when it has one this reader does not know."""

    def __init__(self, message: str, schema_version: int | None = None):
        super().__init__(message)
        self.schema_version = schema_version


@dataclasses.dataclass
class Run:
    path: Path
    schema_version: int
    attrs: dict[str, Any]
    config: dict[str, Any]               # flat dotted keys, from the `config` attribute
    series: dict[str, np.ndarray]        # every steps/, ranks/, comm/ dataset, cut to completed_steps rows
    completed_steps: int
    missing: list[str]                   # datasets analysis wanted and the file lacks
    model_state: np.ndarray | None = None    # memory/model_state_bytes [rank, component], once after step 0
    components: list[str] = dataclasses.field(default_factory=list)   # its columns (param, grad, ...)

    @property
    def status(self) -> str:
        return str(self.attrs["status"])

    @property
    def killed(self) -> bool:
        """At `running` with no end time: killed, unless a job is still writing it (docs/results-schema.md)."""
        return self.status == "running" and not str(self.attrs.get("end_time", ""))


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _attr(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.generic):
        return v.item()
    return v


def _sniff(path: Path) -> None:
    if not path.exists():
        raise ResultsFileError(f"'{path}' does not exist")
    if path.is_dir():
        raise ResultsFileError(f"'{path}' is a directory, not a results file")
    size = path.stat().st_size
    if size == 0:
        raise ResultsFileError(f"'{path}' is empty (0 bytes): its run was killed while creating it; rerun the task")
    with open(path, "rb") as f:
        head = f.read(8)
    if head != HDF5_SIGNATURE:
        raise ResultsFileError(f"'{path}' is not an HDF5 file (no HDF5 signature), so not an hzpbench results file")


def open_run(path: Path) -> Run:
    path = Path(path)
    _sniff(path)
    try:
        f = h5py.File(path, "r", locking=False)
    except OSError as e:
        msg = str(e)
        if "truncated" in msg or "eof" in msg.lower():
            raise ResultsFileError(f"'{path}' is truncated ({msg}): copy it again; for a killed writer "
                                   "`h5clear --increment FILE` may recover it") from None
        raise ResultsFileError(f"'{path}' cannot be opened by HDF5: {msg}") from None
    with f:
        attrs = {k: _attr(v) for k, v in f.attrs.items()}
        if "schema_version" not in attrs:
            raise ResultsFileError(f"'{path}' is an HDF5 file but not an hzpbench results file (no schema_version)")
        version = int(attrs["schema_version"])
        if version not in KNOWN_SCHEMA_VERSIONS:
            newest = max(KNOWN_SCHEMA_VERSIONS)
            raise ResultsFileError(
                f"'{path}' has schema_version {version}, "
                + (f"newer than the {newest} analysis reads: use a checkout as new as the hzpbench that "
                   f"wrote it ({attrs.get('hzpbench_version', '?')}, {attrs.get('git_sha', '?')})" if version > newest
                   else f"which analysis does not know (it reads {', '.join(map(str, KNOWN_SCHEMA_VERSIONS))})"),
                version)
        lacking = [a for a in REQUIRED_ATTRIBUTES if a not in attrs]
        if lacking:
            raise ResultsFileError(f"'{path}' lacks the root attribute(s) {', '.join(lacking)}: not a complete "
                                   "hzpbench results file")
        try:
            config = _flatten(tomllib.loads(str(attrs["config"])))
        except tomllib.TOMLDecodeError as e:
            raise ResultsFileError(f"'{path}': its config attribute is not valid TOML ({e})") from None
        series: dict[str, np.ndarray] = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name.split("/", 1)[0] in ("steps", "ranks", "comm"):
                series[name] = obj[...]

        f.visititems(visit)
        model_state, components = None, []
        if "memory/model_state_bytes" in f:
            ds = f["memory/model_state_bytes"]
            model_state = ds[...]
            components = [_attr(c) for c in ds.attrs.get("components", [])]
    # Completed steps = the fewest rows among the step series (a kill may leave one series a row longer).
    completed = min((len(v) for v in series.values()), default=0)
    series = {k: v[:completed] for k, v in series.items()}
    return Run(path, version, attrs, config, series, completed, [], model_state, components)
