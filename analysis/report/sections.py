"""The parts every report has: the header (what ran, at what scale, on which links), provenance (program,
commit, machine), the configuration axes, the per-configuration and per-run tables, the figures, and the
runs that did not finish ok with their reasons and the end of their logs."""
from __future__ import annotations

import collections
from pathlib import Path

import pandas as pd

from ..collect import by_config
from ..collect.cli import table_of
from ..load import Results, labels
from . import fmt
from .blocks import Bullets, Heading, Image, Table, Text


def _distinct(values) -> list:
    out = []
    for v in values:
        v = labels.plain(v)
        if v is not None and v not in out:
            out.append(v)
    return out


def _join(values) -> str:
    return ", ".join(labels.value_text(v) for v in values) or "–"


def scale_text(res: Results) -> str:
    r = res.runs[res.runs["world_size"].notna()]
    if r.empty:
        return "no run could be read"
    worlds = _distinct(sorted(r["world_size"].dropna().astype(int)))
    rpn = _distinct(r.get("topology.ranks_per_node", pd.Series(dtype=object)))
    presets = _distinct(r.get("model.preset", pd.Series(dtype=object)))
    params = _distinct(r["num_params"].dropna().astype(int)) if "num_params" in r else []
    seq = _distinct(r.get("model.seq_len", pd.Series(dtype=object)))
    prec = _distinct(r.get("train.precision", pd.Series(dtype=object)))
    gb = _distinct(r.get("train.global_batch", pd.Series(dtype=object)))
    mb = _distinct(r.get("train.micro_batch_size", pd.Series(dtype=object)))
    steps = _distinct(r.get("train.steps", pd.Series(dtype=object)))
    nodes = ", ".join("ranks_per_node from the machine" if v == 0 else f"virtual nodes of {v}" for v in rpn)
    return (f"{_join(worlds)} rank(s) ({nodes}); model {_join(presets)} "
            f"({', '.join(f'{p / 1e6:.3g}M' for p in params)} parameters), sequence length {_join(seq)}, "
            f"{_join(prec)}, global batch {_join(gb)} sequences in micro-batches of {_join(mb)}; steps per run: "
            f"{_join(steps)}.")


def links_text(res: Results) -> str:
    r = res.runs[res.runs["state"].isin(["ok", "failed", "killed", "diverged", "running"])]
    if r.empty:
        return "–"
    parts = []
    single = r[r["world_size"] == 1]
    if len(single):
        parts.append(f"{len(single)} run(s) at one rank (no communicator: nothing emulated)")
    r = r[r["world_size"] != 1]
    for (emulate, profile, ratio), g in r.groupby(
            [r.get("links.emulate", pd.Series(False, index=r.index)).map(labels.truthy),
             r.get("links.profile", pd.Series("none", index=r.index)).astype(str),
             r.get("links.comm_to_compute", pd.Series(0.0, index=r.index)).astype(float)], sort=False):
        if not emulate:
            parts.append(f"{len(g)} run(s) without link emulation")
            continue
        inter = [float(res.attrs[x].get("links.inter_bandwidth_gbps", "nan")) for x in g["run"] if x in res.attrs]
        intra = [float(res.attrs[x].get("links.intra_bandwidth_gbps", "nan")) for x in g["run"] if x in res.attrs]
        bw = ""
        if inter:
            bw = (f"; emulated inter-node {min(inter) * 1000:.4g}–{max(inter) * 1000:.4g} MB/s, intra-node "
                  f"{min(intra) * 1000:.4g}–{max(intra) * 1000:.4g} MB/s (set per run from its measured compute rate)")
        how = f"comm_to_compute r = {ratio:g} with {profile}'s intra/inter ratio" if ratio > 0 else \
            f"profile {profile} (its FLOP per byte at the measured compute rate)"
        parts.append(f"{len(g)} run(s): {how}{bw}")
    return "; ".join(parts) + "."


def provenance(res: Results) -> Bullets:
    a = list(res.attrs.values())

    def vals(key):
        return _join(_distinct(x.get(key) for x in a))
    shas = _distinct(f"{x.get('git_sha')}{' (dirty)' if int(x.get('git_dirty', 0)) else ''}" for x in a)
    starts = sorted(str(x.get("start_time")) for x in a if x.get("start_time"))
    ends = sorted(str(x.get("end_time")) for x in a if x.get("end_time"))
    items = [f"hzpbench {vals('hzpbench_version')}, git {_join(shas)}; build: {vals('build_options')}",
             f"machine: host {vals('host')}; CPU {vals('cpu_model')}; GPU {vals('gpu_model')}; backend {vals('backend')}",
             f"libraries: MPI {vals('lib.mpi')}; HDF5 {vals('lib.hdf5')}; OpenBLAS {vals('lib.openblas')} "
             f"({vals('threads.openblas')} thread(s) per rank; intra-op pool {vals('threads.intra_op')})",
             f"runs from {starts[0] if starts else '?'} to {ends[-1] if ends else '?'} (UTC)"]
    for m in res.manifests:
        items.append(f"sweep `{m.get('name')}` from spec `{m.get('spec')}` (SHA-256 {str(m.get('spec_sha256'))[:12]}…), "
                     f"{len(m.get('tasks', []))} task(s), created {m.get('created')}")
    return Bullets(items)


def axes_block(res: Results) -> list:
    if not res.axes:
        return [Text("No configuration axes: every run has the same configuration.")]
    items = []
    for a in res.axes:
        values = _distinct(res.runs[a]) if a in res.runs else []
        items.append(f"`{a}`: {_join(values)}")
    src = "the sweep's manifest" if res.manifests else "the keys that differ between the results files"
    return [Text(f"Axes (from {src}); each run's configuration is named by its layout and these values."),
            Bullets(items)]


def config_table(res: Results) -> Table:
    t, _ = table_of(res)
    # Fold by the configuration's label: it names the axes' values one to one (load/labels.py).
    t.insert(2, "configuration", t["task"].map(res.runs.set_index("run")["config"]))
    folded = by_config.fold(t, ["configuration"])
    rows = []
    for _, f in folded.iterrows():
        row = {"configuration": f["configuration"], "runs": f["runs"], "how they ended": f["statuses"],
               "step time": fmt.seconds(f["step_time_s_median"]),
               "spread over repeats": fmt.pct(f["step_time_s_median_repeat_spread"]),
               "tokens/s": fmt.num(f["tokens_per_s_median"]), "MFU": fmt.pct(f["mfu_median"], 2),
               "exposed comm": fmt.pct(f["exposed_comm_frac_median"])}
        for lv in res.levels:
            row[f"{lv} bytes/rank/step"] = fmt.nbytes(f.get(f"bytes_{lv}_per_rank_step_median"))
        row["peak memory/rank"] = fmt.nbytes(f["mem_peak_bytes_max"])
        row["final loss"] = fmt.num(f["final_loss"])
        rows.append(row)
    return Table(pd.DataFrame(rows), "Per configuration: medians over its ok runs (runs that are not ok are "
                                     "counted, not averaged in); spread = (max − min)/median of the runs' median "
                                     "step time; bytes are what one rank sends per step on that link level.")


def runs_table(res: Results) -> Table:
    t, _ = table_of(res)
    meta = res.runs.set_index("run")
    rows = []
    for _, r in t.iterrows():
        m = meta.loc[r["task"]]
        rows.append({"results file": Path(r["file"]).name, "status": r["status"], "configuration": m["config"],
                     "steps": f"{fmt.count(r['completed_steps'])} of {fmt.count(r['planned_steps'])}",
                     "measured": fmt.count(r["measured_steps"]), "step time": fmt.seconds(r["step_time_s_median"]),
                     "MFU": fmt.pct(r["mfu_median"], 2), "exposed comm": fmt.pct(r["exposed_comm_frac_median"]),
                     "peak memory/rank": fmt.nbytes(r["mem_peak_bytes_max"]), "final loss": fmt.num(r["final_loss"])})
    return Table(pd.DataFrame(rows), "Every run, named by its results file; medians over its measured steps.")


def _log_tail(file: str, lines: int = 3) -> str:
    log = Path(file).with_suffix(".log")
    if not log.is_file():
        return ""
    tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-lines:]
    return " / ".join(tail)


def failed_runs(res: Results) -> list:
    bad = res.runs[res.runs["state"] != "ok"]
    counts = collections.Counter(res.runs["state"])
    head = Text("Runs: " + ", ".join(f"{v} {k}" for k, v in counts.most_common()) + ".")
    if bad.empty:
        return [head, Text("Every run finished ok.")]
    rows = []
    for _, r in bad.iterrows():
        tail = _log_tail(r["file"])
        rows.append({"results file": Path(r["file"]).name, "state": r["state"], "status": r["status"],
                     "steps completed": fmt.count(r["completed_steps"]),
                     "steps planned": fmt.count(r["planned_steps"]), "configuration": r["config"],
                     "end of its log": tail or "–"})
    return [head, Table(pd.DataFrame(rows), "Runs that did not finish ok (failed: an error on a rank or the "
                                            "watchdog; killed: the file stopped at status running; diverged: a "
                                            "non-finite loss). Their numbers stay out of every median above.")]


def figure_blocks(figures: list, report_dir: Path) -> list:
    out = []
    skipped = []
    for f in figures:
        if f.png is None:
            skipped.append(f"{f.title}: {f.skipped}")
            continue
        out += [Heading(f.title, 3), Image(str(Path(f.png).relative_to(report_dir)), f.title, f.caption,
                                           str(Path(f.csv).relative_to(report_dir)))]
    if skipped:
        out += [Text("Not drawn:"), Bullets(skipped)]
    return out
