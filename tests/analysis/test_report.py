"""analysis.report on the tiny sweep of conftest.py: one Markdown and one HTML file with every figure inline
(each image it links exists), the configuration axes, provenance, and the failed, killed and diverged runs
listed with their results files and reasons."""
import re
from pathlib import Path

import h5py

from analysis.report import cli


def test_report_lists_every_figure_and_the_runs_that_did_not_finish(sweep, tmp_path):
    out = tmp_path / "report"
    assert cli.main([str(sweep), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(images) == 8
    for img in images:
        assert (out / img).is_file(), img
        assert f"src='{img}'" in html
    # The section of runs that did not finish ok: each named by its results file, with its state and reason.
    section = md.split("## Runs that did not finish ok", 1)[1]
    rows = {ln.split("|")[1].strip(): ln for ln in section.splitlines() if ln.startswith("| ") and ".h5" in ln}
    assert set(rows) == {"failed.h5", "killed.h5", "diverged.h5"}
    assert "| failed | failed: 0: debug.throw_at" in rows["failed.h5"]
    assert "| killed | killed |" in rows["killed.h5"] and "| 100000 |" in rows["killed.h5"]
    with h5py.File(sweep / "killed.h5", "r", locking=False) as f:
        flushed = min(len(f[k]) for k in ("steps/loss", "ranks/step_time_s"))
    assert f"| killed | killed | {flushed} |" in rows["killed.h5"]
    # Header, provenance and axes.
    assert "**Scale.**" in md and "**Links.**" in md and "## Provenance" in md and "git " in md
    assert "`scheduler.name`: " in md and "## Configuration axes" in md
    # Every run is in the per-run table by its file name.
    for f in sweep.glob("*.h5"):
        assert f"| {f.name} |" in md
    assert "<table" in html and "killed.h5" in html


def test_report_refuses_a_file(tmp_path):
    f = tmp_path / "x.h5"
    f.write_text("")
    assert cli.main([str(f)]) == 2


def test_the_package_lists_every_subpackage():
    """pyproject.toml names the packages one by one (its folder is the package): a new one must be added."""
    import tomllib
    root = Path(__file__).resolve().parents[2] / "analysis"
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"analysis"} | {"analysis." + p.parent.name for p in root.glob("*/__init__.py")}
    assert listed == found


def test_a_run_stopped_by_a_signal_counts_as_killed(runs, tmp_path):
    """A run that caught SIGTERM (a time limit, scancel) marks itself failed: ...: terminated by SIGTERM; like
    slurm/sweep status, the report and figures count it as killed, stopped from outside."""
    import shutil
    from analysis.load import load
    shutil.copy(runs["ok"], tmp_path / "stopped.h5")
    with h5py.File(tmp_path / "stopped.h5", "r+") as f:
        f.attrs["status"] = "failed: 0: terminated by SIGTERM"
    r = load([tmp_path]).runs.set_index("run")
    assert r.loc["stopped", "state"] == "killed" and r.loc["stopped", "status"] == "failed: 0: terminated by SIGTERM"


def test_paper_tables_take_nd_as_the_baseline_where_it_ran():
    """Tables 2 and 4 measure speed-up against the paper's 100%, ND parallelism (`nd`), in each group that has
    an nd run (Table 4's three lengths, the longest with context parallelism), and against zero3 in a group
    without one (a sweep without nd at that length)."""
    import pandas as pd

    from analysis.report import paper_tables

    base = {"mfu_median": 0.1, "exposed_comm_frac_median": 0.2, "mem_peak_bytes_max": 1e8, "ok": 1, "runs": 1,
            "states": "ok", "comm_to_compute": 0.5, "global_batch": 8}
    pc = pd.DataFrame([
        {**base, "scheduler": "zero3", "seq_len": 64, "config": "zero3 64", "tokens_per_s_median": 50.0},
        {**base, "scheduler": "nd", "seq_len": 64, "config": "nd 64", "tokens_per_s_median": 100.0},
        {**base, "scheduler": "asynchzp", "seq_len": 64, "config": "asynchzp 64", "tokens_per_s_median": 120.0},
        {**base, "scheduler": "zero3", "seq_len": 256, "config": "zero3 256", "tokens_per_s_median": 40.0},
        {**base, "scheduler": "asynchzp", "seq_len": 256, "config": "asynchzp 256", "tokens_per_s_median": 60.0},
        {**base, "scheduler": "zero3", "seq_len": 1024, "config": "zero3 1024", "tokens_per_s_median": 30.0},
        {**base, "scheduler": "nd", "seq_len": 1024, "config": "nd TP=2 × CP=2 × PP=2", "tokens_per_s_median": 20.0},
    ])
    t = paper_tables._versus(pc, paper_tables._nd_or_zero3, ["seq_len"], ["seq_len"])
    got = {(r["seq_len"], r["configuration"]): r["speedup"] for _, r in t.iterrows()}
    assert got[(64, "asynchzp 64")] == "120.0%" and got[(64, "nd 64")] == "100.0%" and got[(64, "zero3 64")] == "50.0%"
    assert got[(256, "asynchzp 256")] == "150.0%" and got[(256, "zero3 256")] == "100.0%"
    assert got[(1024, "nd TP=2 × CP=2 × PP=2")] == "100.0%" and got[(1024, "zero3 1024")] == "150.0%"


def test_nd_layout_names_its_context_parallel_degree(tmp_path):
    """An nd run's layout names its mesh (TP, CP, PP where > 1), read from the results file's config
    (scheduler.cp, which the file's parallel.cp attribute agrees with); a configuration label does not repeat
    the degrees the layout shows, and per_config carries them."""
    from conftest import run

    from analysis.load import labels, load
    from analysis.report import paper_tables

    run(tmp_path / "nd_cp2.h5", "--set", "scheduler.name=nd", "--set", "scheduler.cp=2", ranks=2)
    res = load([tmp_path])
    assert int(res.attrs["nd_cp2"]["parallel.cp"]) == 2
    assert res.runs.set_index("run").loc["nd_cp2", "layout"] == "nd CP=2"
    pc = paper_tables.per_config(res)
    assert pc.iloc[0]["layout"] == "nd CP=2" and pc.iloc[0][["tp", "cp", "pp"]].tolist() == [1, 2, 1]

    cfg = {"scheduler.name": "nd", "scheduler.tp": 2, "scheduler.cp": 2, "scheduler.pp": 2, "model.seq_len": 1024}
    axes = ["scheduler.name", "scheduler.pp", "scheduler.tp", "scheduler.cp", "model.seq_len"]
    assert labels.layout(cfg, 8) == "nd TP=2 × CP=2 × PP=2"
    assert labels.config_label(cfg, 8, axes, False) == "nd TP=2 × CP=2 × PP=2, seq_len=1024"
    assert labels.layout({**cfg, "scheduler.tp": 4, "scheduler.cp": 1}, 8) == "nd TP=4 × PP=2"
    assert labels.layout({"scheduler.name": "nd"}, 8) == "nd"       # a file from before scheduler.cp: cp = 1
    # Other schedulers keep their layout and list the swept nd keys as name=value.
    zero3 = {**cfg, "scheduler.name": "zero3", "scheduler.tp": 4, "scheduler.cp": 1, "scheduler.pp": 1}
    assert labels.config_label(zero3, 8, axes, False) == "zero3, pp=1, tp=4, cp=1, seq_len=1024"
