"""analysis.collect on results files the real hzpbench wrote (conftest.py): the numbers against what the
harness computed itself (its summary.* attributes, a C++ implementation of the same percentiles) and
against closed forms; every run listed with its status; broken inputs named with a clear message."""
import csv
import io
import math
import shutil

import h5py
import numpy as np
import pandas as pd
import pytest

from analysis.collect import by_config, cli, table
from analysis.load.results_file import ResultsFileError, open_run


def collect_rows(*paths, axes=None):
    err = io.StringIO()
    columns, rows, bad = cli.collect([str(p) for p in paths], axes, err=err)
    return columns, {r["task"]: r for r in rows}, bad, err.getvalue()


def test_medians_match_the_harness_summary(runs):
    _, rows, bad, _ = collect_rows(runs["ok"], runs["ddp"])
    assert bad == 0
    for name in ("ok", "ddp"):
        r = rows[name]
        with h5py.File(runs[name], "r") as f:
            a = dict(f.attrs)
        assert r["status"] == "ok"
        assert r["completed_steps"] == 8 and r["planned_steps"] == 8
        assert r["measured_steps"] == a["summary.measured_steps"] == 6   # steps 2..7: harness.warmup_steps = 2
        for col, attr in (("step_time_s_median", "summary.step_time_median_s"),
                          ("step_time_s_p5", "summary.step_time_p5_s"),
                          ("step_time_s_p95", "summary.step_time_p95_s"),
                          ("tokens_per_s_median", "summary.tokens_per_s_median"),
                          ("mfu_median", "summary.mfu_median"),
                          ("exposed_comm_frac_median", "summary.exposed_comm_frac_median")):
            assert r[col] == pytest.approx(a[attr], rel=1e-12, abs=1e-15), col
        assert r["step_time_s_p5"] <= r["step_time_s_median"] <= r["step_time_s_p95"]


def test_bytes_per_level_against_the_all_reduce_volume(runs):
    """ddp at W = 2 all-reduces every fp32 gradient once a step; a ring all-reduce sends
    2 (W - 1) / W of the buffer per rank, i.e. 4 N bytes at W = 2 (plus a few scalars: loss, norms)."""
    cols, rows, _, _ = collect_rows(runs["ddp"], runs["ok"])
    with h5py.File(runs["ddp"], "r") as f:
        n = int(f.attrs["model.num_params"])
    v = rows["ddp"]["bytes_intra_per_rank_step_median"]
    assert 4 * n <= v <= 4 * n + 64, (v, 4 * n)
    # The single-rank run has no communicator: zero bytes, not a missing value.
    assert rows["ok"]["bytes_intra_per_rank_step_median"] == 0
    assert "bytes_intra_per_rank_step_median" in cols


def test_memory_slack_and_loss_from_the_datasets(runs):
    _, rows, _, _ = collect_rows(runs["ddp"])
    r = rows["ddp"]
    with h5py.File(runs["ddp"], "r") as f:
        peak = f["ranks/mem_peak_bytes"][:]
        reserved = f["ranks/mem_reserved_bytes"][:]
        loss = f["steps/loss"][:]
        state = f["memory/model_state_bytes"][:]
    assert r["mem_peak_bytes_max"] == peak.max()
    # Peak allocation holds at least the model state and never exceeds what the allocator reserved.
    assert state[0].sum() <= r["mem_peak_bytes_max"] <= reserved.max()
    assert 0 <= r["slack_median"] < 1
    assert r["final_loss"] == loss[-1] and loss[-1] < loss[0]


def test_failed_diverged_killed_are_listed_not_dropped(runs):
    _, rows, bad, err = collect_rows(*runs.values())
    assert bad == 0, err
    assert rows["failed"]["status"].startswith("failed: 0: debug.throw_at")
    assert rows["diverged"]["status"] == "diverged"
    assert rows["killed"]["status"] == "killed"
    assert math.isnan(rows["diverged"]["final_loss"])             # the NaN step is the last row
    assert rows["killed"]["completed_steps"] >= 4                 # the steps flushed before SIGKILL
    assert rows["killed"]["planned_steps"] == 100000
    assert rows["failed"]["completed_steps"] == 3                 # steps 0..2 ran before the throw at step 3
    # The killed run's measured steps still have medians (from its datasets, not its missing summary).
    assert rows["killed"]["step_time_s_median"] > 0


def test_axes_are_the_keys_that_differ(runs):
    cols, rows, _, _ = collect_rows(runs["ok"], runs["ddp"], runs["diverged"])
    axes = cols[cols.index("status") + 1: cols.index("world_size")]
    assert "scheduler.name" in axes and "debug.nan_at" in axes and "output.path" not in axes
    assert rows["ddp"]["scheduler.name"] == "ddp" and rows["ok"]["scheduler.name"] == "none"


def broken(tmp_path, runs, name):
    dst = tmp_path / f"{name}.h5"
    shutil.copy(runs["ok"], dst)
    return dst


def test_broken_inputs_get_one_clear_message(tmp_path, runs):
    (tmp_path / "empty.h5").write_bytes(b"")
    (tmp_path / "text.h5").write_text("not hdf5\n")
    data = runs["ok"].read_bytes()
    (tmp_path / "truncated.h5").write_bytes(data[: len(data) // 3])
    newer = broken(tmp_path, runs, "newer")
    with h5py.File(newer, "r+") as f:
        f.attrs["schema_version"] = np.int64(3)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = [1, 2, 3]
    lacking = broken(tmp_path, runs, "lacking")
    with h5py.File(lacking, "r+") as f:
        del f["steps/mfu"]
        del f["ranks/slack"]

    cols, rows, bad, err = collect_rows(tmp_path)
    expect = {
        "empty": "is empty (0 bytes)",
        "text": "is not an HDF5 file",
        "truncated": "is truncated",
        "newer": "has schema_version 3, newer than the 2 analysis reads",
        "foreign": "is an HDF5 file but not an hzpbench results file",
    }
    assert bad == len(expect)
    for name, msg in expect.items():
        assert rows[name]["status"].startswith("unreadable: ") and msg in rows[name]["status"], rows[name]
        assert sum(msg in line for line in err.splitlines()) == 1, err
    # Version 2 files beside a version 3 one: said once, the newer one listed as unreadable above.
    assert "the inputs mix schema versions: 2 (" in err and "3 (1 file(s), e.g. newer.h5)" in err
    # A readable file lacking datasets is a row with those columns empty, and said so once.
    assert rows["lacking"]["status"] == "ok"
    assert math.isnan(rows["lacking"]["mfu_median"]) and math.isnan(rows["lacking"]["slack_median"])
    assert rows["lacking"]["step_time_s_median"] > 0
    assert "lacks dataset(s) ranks/slack, steps/mfu" in err


def test_mixed_schema_versions_are_reported(tmp_path, runs):
    import analysis.load.results_file as rf
    # Files of this build are version 2; a version-1 file (no preempted, no first_step) is read as well.
    shutil.copy(runs["ok"], tmp_path / "v2.h5")
    v1 = broken(tmp_path, runs, "v1")
    with h5py.File(v1, "r+") as f:
        f.attrs["schema_version"] = np.int64(1)
    assert rf.KNOWN_SCHEMA_VERSIONS == (1, 2)
    _, rows, bad, err = collect_rows(tmp_path)
    assert bad == 0 and "the inputs mix schema versions: 1 (1 file(s), e.g. v1.h5); 2 (1 file(s), e.g. v2.h5)" in err


def test_command_line_writes_csv_and_markdown(tmp_path, runs, capsys):
    out_csv, out_md = tmp_path / "t.csv", tmp_path / "t.md"
    rc = cli.main([str(runs["ok"]), str(runs["killed"]), "--csv", str(out_csv), "--md", str(out_md)])
    assert rc == 0
    rows = list(csv.DictReader(out_csv.read_text().splitlines()))
    assert [r["task"] for r in rows] == ["ok", "killed"] and rows[1]["status"] == "killed"
    assert float(rows[0]["step_time_s_median"]) > 0
    md = out_md.read_text().splitlines()
    assert md[0].startswith("| task | status |") and len(md) == 4 and "| killed |" in md[3]
    assert "2 run(s): 1 ok, 1 killed" in capsys.readouterr().err
    assert cli.main([str(tmp_path / "nothing_here")]) == 1


def test_manifest_tasks_without_a_file_are_rows(tmp_path, runs):
    import json
    shutil.copy(runs["ok"], tmp_path / "a.h5")
    (tmp_path / "sweep.json").write_text(json.dumps({"format": 1, "axes": ["train.lr"], "tasks": [
        {"index": 0, "name": "a", "repeat": 0, "values": {"train.lr": 0.003}},
        {"index": 1, "name": "b", "repeat": 0, "values": {"train.lr": 0.01}}]}))
    cols, rows, bad, _ = collect_rows(tmp_path)
    assert bad == 0 and list(rows) == ["a", "b"]
    assert rows["b"]["status"].startswith("no results file") and rows["b"]["train.lr"] == 0.01
    assert rows["a"]["status"] == "ok" and "repeat" in cols


def test_markdown_cells():
    assert table._md_cell("mfu_median", 0.1234) == "12.34%"
    assert table._md_cell("mem_peak_bytes_max", 5 * 1024 * 1024) == "5 MiB"
    assert table._md_cell("final_loss", float("nan")) == "–"
    assert table._csv_cell(805128.0) == "805128" and table._csv_cell(float("nan")) == ""


def test_open_run_missing_file(tmp_path):
    with pytest.raises(ResultsFileError, match="does not exist"):
        open_run(tmp_path / "no.h5")


def test_per_config_folds_repeats_and_keeps_every_status(tmp_path, runs):
    """Three repeats of one configuration (two ok, one killed) and one other: medians over the ok runs, the
    killed run counted in statuses; the spread across repeats is (max - min) / median of the ok runs."""
    import json
    for name, src in (("a_r0", "ok"), ("a_r1", "ok"), ("a_r2", "killed"), ("b_r0", "ddp")):
        shutil.copy(runs[src], tmp_path / f"{name}.h5")
    with h5py.File(tmp_path / "a_r1.h5", "r+") as f:      # a slower repeat: every step time x 1.5
        f["steps/step_time_s"][...] = f["steps/step_time_s"][...] * 1.5
    (tmp_path / "sweep.json").write_text(json.dumps({"format": 1, "axes": ["scheduler.name"], "tasks": [
        {"index": i, "name": n, "repeat": i % 3, "values": {"scheduler.name": v}}
        for i, (n, v) in enumerate((("a_r0", "none"), ("a_r1", "none"), ("a_r2", "none"), ("b_r0", "ddp")))]}))
    columns, rows, bad = cli.collect([str(tmp_path)], err=io.StringIO())
    per_run = {r["task"]: r for r in rows}
    folded = by_config.fold(pd.DataFrame(rows, columns=columns), ["scheduler.name"])
    cols = list(folded.columns)
    assert list(folded["scheduler.name"]) == ["none", "ddp"]
    a, b = folded.to_dict("records")
    assert a["runs"] == 3 and a["statuses"] == "2 ok, 1 killed" and b["statuses"] == "1 ok"
    t0, t1 = per_run["a_r0"]["step_time_s_median"], per_run["a_r1"]["step_time_s_median"]
    assert t1 == pytest.approx(1.5 * t0)
    assert a["step_time_s_median"] == pytest.approx((t0 + t1) / 2)            # the killed run is not in it
    assert a["step_time_s_median_repeat_spread"] == pytest.approx((t1 - t0) / ((t0 + t1) / 2))
    assert math.isnan(b["step_time_s_median_repeat_spread"])                 # one run: no spread
    assert "file" not in cols and "step_time_s_p5" not in cols and "statuses" in cols
    assert cli.main([str(tmp_path), "--per-config", "--csv", str(tmp_path / "c.csv")]) == 0
    assert (tmp_path / "c.csv").read_text().splitlines()[1].startswith("none,3,\"2 ok, 1 killed\",")


def test_simulated_runs_are_a_column_and_never_fold_into_measured_ones(runs, tmp_path):
    """hzpbench simulate's files (root attribute simulated = 1) say so in collect's table, and a per-config fold keeps
    them apart from the measured runs of the same configuration."""
    shutil.copy(runs["ok"], tmp_path / "measured.h5")
    shutil.copy(runs["ok"], tmp_path / "simulated.h5")
    with h5py.File(tmp_path / "simulated.h5", "r+") as f:
        f.attrs["simulated"] = 1
    columns, rows, bad = cli.collect([str(tmp_path)], err=io.StringIO())
    per_run = {r["task"]: r for r in rows}
    assert "simulated" in columns and per_run["simulated"]["simulated"] == 1 and per_run["measured"]["simulated"] == 0
    folded = by_config.fold(pd.DataFrame(rows, columns=columns), [])  # one configuration
    assert len(folded) == 2 and sorted(folded["simulated"]) == [0, 1]
