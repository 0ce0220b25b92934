"""analysis.figures on a tiny sweep the real hzpbench wrote (conftest.py: ok, failed, killed and diverged runs,
zero3 and asynchzp at two ranks): every figure writes its PNG and CSV, and every number in the CSVs equals
what this test computes from the HDF5 files with h5py and numpy alone (none of the package's code), so a
figure cannot draw numbers its data file does not hold, nor numbers the results files do not say."""
import math
import tomllib
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from analysis.figures import cli

FIGURES = ["runs", "closure", "loss", "memory_state", "fragmentation", "exposed_vs_ratio", "granularity",
           "comm_scaling"]
PNG = b"\x89PNG\r\n\x1a\n"


class H5:
    """One results file read with h5py: attributes, flat config, series cut to the completed steps."""

    def __init__(self, path: Path):
        with h5py.File(path, "r", locking=False) as f:
            self.attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            self.series = {}
            f.visititems(lambda n, o: self.series.__setitem__(n, o[...])
                         if isinstance(o, h5py.Dataset) and n.split("/")[0] in ("steps", "ranks", "comm") else None)
            self.state = f["memory/model_state_bytes"][...] if "memory/model_state_bytes" in f else None
        self.steps = min(len(v) for v in self.series.values())
        self.series = {k: v[: self.steps] for k, v in self.series.items()}
        self.config = {}

        def flat(d, pre=""):
            for k, v in d.items():
                flat(v, f"{pre}{k}.") if isinstance(v, dict) else self.config.__setitem__(pre + k, v)
        flat(tomllib.loads(str(self.attrs["config"])))
        self.measured = np.arange(self.steps) >= int(self.attrs["warmup_steps"])
        self.world = int(self.attrs["world_size"])

    def rank_mean(self, name):
        return self.series[name].astype(float).mean(axis=1)

    def median(self, per_step):
        return float(np.median(per_step[self.measured]))


@pytest.fixture(scope="module")
def drawn(sweep, tmp_path_factory):
    out = tmp_path_factory.mktemp("figs")
    assert cli.main([str(sweep), "--out", str(out)]) == 0
    files = {p.stem: H5(p) for p in sweep.glob("*.h5")}
    return out, files


def csv(out, stem) -> pd.DataFrame:
    return pd.read_csv(out / f"{stem}.csv")


def close(a, b):
    if isinstance(b, float) and math.isnan(b):
        return isinstance(a, float) and math.isnan(a)
    return a == pytest.approx(b, rel=1e-12, abs=1e-12)


def test_every_figure_writes_its_png_and_csv(drawn):
    out, _ = drawn
    for stem in FIGURES:
        png, data = out / f"{stem}.png", out / f"{stem}.csv"
        assert png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000, stem
        assert len(pd.read_csv(data)) > 0, stem


def test_runs_csv_has_every_run_and_how_it_ended(drawn):
    out, files = drawn
    d = csv(out, "runs").set_index("run")
    assert set(d.index) == set(files)
    for name, h in files.items():
        assert d.loc[name, "completed_steps"] == h.steps
        want = "killed" if h.attrs["status"] == "running" else h.attrs["status"].split(":")[0]
        assert d.loc[name, "state"] == want
    assert d.loc["failed", "state"] == "failed" and d.loc["killed", "state"] == "killed"
    assert d.loc["diverged", "state"] == "diverged"


def test_closure_csv_equals_the_per_rank_datasets(drawn):
    out, files = drawn
    d = csv(out, "closure")
    assert set(d["runs"]) == set(files)          # every run has its bar: ok ones by configuration, others alone
    for _, bar in d.iterrows():
        h = files[bar["runs"]]
        total = 0.0
        for part in ("compute_s", "join_wait_s", "transfer_wait_s", "pipeline_wait_s", "optimizer_s", "other_s"):
            want = h.median(h.rank_mean(f"ranks/{part}"))
            assert close(bar[part], want), (bar["runs"], part)
            total += want
        assert close(bar["total_s"], total)
        # The parts close to the step time in every step (docs/run.md), so stacked they are the step. (Their
        # medians need not sum to the median step time: on a loaded machine the steps differ.)
        parts = sum(h.series[f"ranks/{p}"] for p in ("compute_s", "exposed_comm_s", "pipeline_wait_s", "optimizer_s",
                                                     "other_s"))
        np.testing.assert_allclose(parts, h.series["ranks/step_time_s"], rtol=0.02)
    assert set(d[d["state"] != "ok"]["state"]) == {"failed", "killed", "diverged"}


def test_loss_csv_equals_steps_loss_and_the_difference_to_none(drawn):
    out, files = drawn
    d = csv(out, "loss")
    for name, h in files.items():
        rows = d[d["run"] == name].sort_values("step")
        assert len(rows) == h.steps
        np.testing.assert_array_equal(rows["loss"].to_numpy(), h.series["steps/loss"])
        assert close(rows["entropy_floor"].iloc[0], float(h.attrs["entropy_floor"]))
    # ddp, zero3 and asynchzp train the ok run's problem (same model, data and training keys): their loss
    # minus none's, step by step. The killed run plans other steps (another schedule): no reference.
    none = files["ok"].series["steps/loss"]
    for name in ("ddp", "zero3", "asynchzp_async", "asynchzp_inline", "diverged"):
        rows = d[d["run"] == name].sort_values("step")
        assert (rows["none_run"] == "ok").all(), name
        np.testing.assert_array_equal(rows["loss_minus_none"].to_numpy(), files[name].series["steps/loss"] - none[:len(rows)])
    assert d[d["run"] == "killed"]["none_run"].isna().all()


def closed_form(h: H5) -> dict:
    """fp32 model state per rank by component (the paper's Table 1 forms with fp32 parameters, no master)."""
    n = int(h.attrs["model.num_params"])
    name, w = h.config["scheduler.name"], h.world
    if name == "asynchzp":
        z1 = h.config["scheduler.z1"] or w
        z2 = h.config["scheduler.z2"] or z1
        z3 = h.config["scheduler.z3"] or z2
    else:
        z1 = z2 = z3 = w if name == "zero3" else 1
    return {"param": 4 * n / z3, "grad": 4 * n / z2, "master": 0, "m": 4 * n / z1, "v": 4 * n / z1}


def test_memory_csv_equals_model_state_bytes_and_the_closed_form(drawn):
    out, files = drawn
    d = csv(out, "memory_state")
    for run, g in d.groupby("run"):
        h = files[run]
        rank = int(np.argmax(h.state.sum(axis=1)))
        comps = ["param", "grad", "master", "m", "v"]
        form = closed_form(h)
        for c in comps:
            row = g[g["component"] == c].iloc[0]
            assert row["measured_bytes"] == h.state[rank, comps.index(c)] and row["rank"] == rank
            assert close(row["closed_form_bytes"], float(form[c])), (run, c)
        assert g[g["component"] == "total"]["measured_bytes"].iloc[0] == h.state[rank].sum()
    assert {"zero3", "asynchzp_async", "asynchzp_inline", "ddp", "ok"} <= set(d["run"])


def test_fragmentation_csv_equals_the_allocator_series(drawn):
    out, files = drawn
    d = csv(out, "fragmentation")
    for name, h in files.items():
        rows = d[d["run"] == name].sort_values("step")
        for col, ds in (("allocated", "ranks/mem_allocated_bytes"), ("reserved", "ranks/mem_reserved_bytes"),
                        ("slack", "ranks/slack"), ("ext_frag", "ranks/ext_frag")):
            np.testing.assert_allclose(rows[col].to_numpy(), h.rank_mean(ds), rtol=1e-12)
        np.testing.assert_array_equal(rows["peak_max_over_ranks"].to_numpy(), h.series["ranks/mem_peak_bytes"].max(axis=1))


def test_exposed_csv_equals_exposed_frac_at_the_links_ratio(drawn):
    out, files = drawn
    d = csv(out, "exposed_vs_ratio").set_index("run")
    for name, h in files.items():
        assert close(d.loc[name, "exposed_comm_frac_median"], h.median(h.series["steps/exposed_comm_frac"]))
        r = h.config.get("links.comm_to_compute", 0)
        if h.world == 1:
            assert math.isnan(d.loc[name, "comm_to_compute"])          # no communicator: listed, not drawn
        elif r > 0:
            assert d.loc[name, "comm_to_compute"] == r
        else:   # a link profile: the ratio its links amount to, 4N bytes between nodes over a micro-batch
            n, bw = float(h.attrs["model.num_params"]), float(h.attrs["links.inter_bandwidth_gbps"]) * 1e9
            assert close(d.loc[name, "comm_to_compute"], 4 * n / (bw * float(h.attrs["compute.micro_batch_s"])))
    assert d.loc["asynchzp_inline", "comm_to_compute"] == 2


def test_granularity_csv_equals_the_asynchzp_runs(drawn):
    out, files = drawn
    d = csv(out, "granularity")
    assert len(d) == 2 and set(d["runs"]) == {"asynchzp_async", "asynchzp_inline"}
    for _, row in d.iterrows():
        h = files[row["runs"]]
        assert (row["z1"], row["z2"], row["z3"]) == ((2, 2, 1) if row["runs"] == "asynchzp_async" else (2, 1, 1))
        assert row["async"] == (row["runs"] == "asynchzp_async")
        assert close(row["step_time_s"], h.median(h.series["steps/step_time_s"]))
        assert close(row["exposed_comm_frac"], h.median(h.series["steps/exposed_comm_frac"]))
        assert close(row["peak_mib"], h.series["ranks/mem_peak_bytes"].max() / 2**20)
        assert close(row["model_state_mib"], h.state.sum(axis=1).max() / 2**20)


def test_comm_scaling_csv_equals_the_bytes_per_level(drawn):
    out, files = drawn
    d = csv(out, "comm_scaling")
    assert set(d["run"]) == {n for n, h in files.items() if h.world > 1 and h.steps > 0}
    for _, row in d.iterrows():
        h = files[row["run"]]
        ops = [k for k in h.series if k.startswith("comm/") and k.endswith(f"/{row['level']}/bytes")]
        per_rank = sum(h.series[k].astype(float) for k in ops) if ops else np.zeros((h.steps, h.world))
        assert close(row["bytes_per_rank_step"], h.median(per_rank.mean(axis=1))), (row["run"], row["level"])
        assert row["seq_len"] == h.config["model.seq_len"]
        assert row["micro_batches_per_rank"] == h.config["train.global_batch"] / h.config["train.micro_batch_size"] / h.world
    # zero3 gathers every micro-batch: 8 micro-batches per rank move twice what 4 do; the sequence length moves
    # nothing more (the paper's §4.4 argument, here at 2 ranks).
    inter = d[d["level"] == "inter"].set_index("run")["bytes_per_rank_step"]
    assert inter["zero3_seq128"] == inter["zero3"]
    assert inter["zero3_batch32"] == pytest.approx(2 * inter["zero3"], rel=0.01)


def test_a_folder_without_runs_draws_nothing(tmp_path):
    assert cli.main([str(tmp_path)]) == 1
