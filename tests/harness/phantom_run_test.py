#!/usr/bin/env python3
"""Phantom peers (docs/phantom.md): one process runs rank r of a W-rank job.

Scenarios (one CTest each, see run_tests.cmake):
  exact_<layout>  zero3, hsdp, asynchzp (z1=4, z2=z3=2, async and inline; and with the tied table's rows split off,
                  all-gathered or by all-to-all-v, also under cp2), nd tp2, cp2 and pp2, asynchzp cp2 and pp2 on `tiny`, W = 4 in two virtual nodes of 2, 2 steps: the real 4-rank run (mpiexec -n 4) against
                  phantom runs of ranks 0 and 3. Per step, op and link level, the phantom's bytes equal the real
                  run's column of that rank (the pipeline's sends included), and its model-state bytes per component
                  (memory/model_state_bytes) equal that rank's row. Every phantom column is its own rank's (the
                  stand-in gathers copy it), so all are compared.
  exact_nd_ep<P>  the same on `tiny-moe` with nd ep2 (the ep group inside a node) and ep4 (across both): model
                  state and every op but all_to_allv exact; all_to_allv's bytes per level equal the phantom's model
                  (docs/phantom.md, "Expert parallelism"), computed here from the rank's own routing (steps/moe/load,
                  the stand-in sum of dp copies of the rank's load).
  pipeline_wait   nd pp2 at W = 4 with emulated links: phantom runs of ranks 0 and 3 (stage 1) against the real run.
                  Stage 1's phantom waits on its absent peer stage (pipeline_wait_s > 0 after the first step) and
                  no phantom step is shorter than its own compute; the phantom/real step ratio is printed, never
                  asserted.
  scale           `small` zero3 at W = 64 (8 ranks a node), rank 37: completes, reads back phantom (attributes
                  phantom, phantom.world_size, phantom.rank, loss.comparable = 0, [step, 64] series), finite loss;
                  the summary line says the loss is not comparable.
  links           tiny zero3 at W = 4, rank 0, with links emulated at 0.02 GB/s between nodes: each step lasts at
                  least this rank's inter-node bytes over the bandwidth (rank 0 leads its node's interface in every
                  group, so its calls hold it one after another), and far longer than without emulation.
  cuda_exact_<layout>  (gpu; exit 77 without a device) zero3, asynchzp async (z 8/4/4) and nd at pp = 2, cp = 2 and tp = 2 on `tiny`, W = 8 in two
                  virtual nodes of 4, rank 3: the phantom run with backend = cuda against the same phantom run on the
                  CPU. Bytes per step, op and level and model-state bytes equal (both are rank 3's dry replay, so
                  deterministic); the GPU file's state is device memory; losses finite.
usage: phantom_run_test.py SCENARIO --hzpbench PATH --mpiexec PATH --ranks N --workdir DIR
       phantom_run_test.py compare CPU.h5 CUDA.h5   (cuda_exact's comparison of two existing files)
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_e2e_test as e2e  # noqa: E402  (the arguments, the fresh workdir, h5py/numpy import and the skip live there)

import h5py  # noqa: E402
import numpy as np  # noqa: E402

LAYOUTS = {
    "zero3": ["scheduler.name=zero3"],
    "hsdp": ["scheduler.name=hsdp", "scheduler.group_size=2"],
    "asynchzp": ["scheduler.name=asynchzp", "scheduler.z1=4", "scheduler.z2=2", "scheduler.z3=2"],
    "asynchzp_inline": ["scheduler.name=asynchzp", "scheduler.z1=4", "scheduler.z2=2", "scheduler.z3=2",
                        "scheduler.async=false"],
    "nd_tp2": ["scheduler.name=nd", "scheduler.tp=2"],
    "nd_cp2": ["scheduler.name=nd", "scheduler.cp=2"],
    "asynchzp_cp2": ["scheduler.name=asynchzp", "scheduler.cp=2", "scheduler.z1=4", "scheduler.z2=2", "scheduler.z3=2"],
    "nd_pp2": ["scheduler.name=nd", "scheduler.pp=2"],
    "asynchzp_pp2": ["scheduler.name=asynchzp", "scheduler.pp=2", "scheduler.z1=2", "scheduler.z2=2", "scheduler.z3=1"],
    # The tied table's rows (docs/data-parallel.md): what a rank sends depends only on its own token ids and the
    # optimizer layout, both the real rank's in a phantom run, so even the all-to-all-v's bytes are exact.
    "asynchzp_tied_allgather": ["scheduler.name=asynchzp", "scheduler.z1=4", "scheduler.z2=2", "scheduler.z3=2",
                                "scheduler.tied_split=rows_allgather"],
    "asynchzp_tied_alltoall": ["scheduler.name=asynchzp", "scheduler.z1=4", "scheduler.z2=2", "scheduler.z3=2",
                               "scheduler.tied_split=rows_alltoall"],
    # The same under cp = 2: a rank's rows are its own tokens' (T = 64 slots of a 128-token micro-batch).
    "asynchzp_cp2_tied_allgather": ["scheduler.name=asynchzp", "scheduler.cp=2", "scheduler.z1=4", "scheduler.z2=2",
                                    "scheduler.z3=2", "scheduler.tied_split=rows_allgather"],
    "asynchzp_cp2_tied_alltoall": ["scheduler.name=asynchzp", "scheduler.cp=2", "scheduler.z1=4", "scheduler.z2=2",
                                   "scheduler.z3=2", "scheduler.tied_split=rows_alltoall"],
}
# Expert parallelism: its all_to_allv bytes are modelled, not exact (the peers' routing is not known).
EP_LAYOUT = ["model.preset=tiny-moe", "scheduler.name=nd"]
# Links off where only bytes are compared: the presets emulate links scaled to this machine's compute rate, slow here.
TINY = ["model.preset=tiny", "train.steps=2", "harness.warmup_steps=0", "links.emulate=false",
        "topology.ranks_per_node=2"]


def sets(pairs):
    out = []
    for p in pairs:
        out += ["--set", p]
    return out


def run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL: {what} exited {p.returncode}:\n{p.stdout[-4000:]}")
    return p.stdout


def comm_bytes(f):
    """{(op, level): array [step, rank]} of comm/*/*/bytes."""
    return {(op, lv): np.asarray(f["comm"][op][lv]["bytes"][...], dtype=np.int64)
            for op in f["comm"] for lv in f["comm"][op]}


def real_and_phantoms(a, cfg, ranks=(0, 3)):
    """The real 4-rank run's bytes and model state, then each phantom rank's; checks the phantom attributes."""
    real = os.path.join(a.workdir, "real.h5")
    run([a.mpiexec, "-n", "4", a.hzpbench, "run", *sets(cfg), "--out", real, "--force"], "the real 4-rank run")
    with h5py.File(real, "r", locking=False) as f:
        rb, rs = comm_bytes(f), f["memory/model_state_bytes"][...]
        assert "phantom" not in f.attrs, "a real run's file says phantom"
    phantoms = {}
    for r in ranks:
        ph = os.path.join(a.workdir, f"phantom{r}.h5")
        run([a.hzpbench, "run", *sets(cfg + ["topology.phantom_world=4", f"topology.phantom_rank={r}"]), "--out", ph,
             "--force"], f"the phantom run of rank {r}")
        with h5py.File(ph, "r", locking=False) as f:
            assert int(f.attrs["phantom"]) == 1 and int(f.attrs["phantom.world_size"]) == 4
            assert int(f.attrs["phantom.rank"]) == r and int(f.attrs["loss.comparable"]) == 0
            load = f["steps/moe/load"][...] if "moe" in f["steps"] else None
            dropped = f["steps/moe/dropped"][...] if "moe" in f["steps"] else None
            phantoms[r] = (comm_bytes(f), f["memory/model_state_bytes"][...], load, dropped)
    return rb, rs, phantoms


def compare(r, rb, rs, pb, ps, failures, skip=()):
    """Bytes per step, op and level (every phantom column) and model state (every row) against the real rank r's."""
    keys = {k for k in set(rb) | set(pb)
            if k[0] not in skip and ((k in rb and rb[k][:, r].any()) or (k in pb and pb[k].any()))}
    if not keys:
        failures.append(f"rank {r}: no bytes recorded at all")
    for k in sorted(keys):
        want = rb[k][:, r] if k in rb else None
        for col in range(4):
            got = pb[k][:, col] if k in pb else None
            if want is None or got is None or not np.array_equal(want, got):
                failures.append(f"rank {r}, {k[0]}/{k[1]}: real {None if want is None else want.tolist()}, "
                                f"phantom column {col} {None if got is None else got.tolist()}")
                break
    for row in range(4):
        if not np.array_equal(ps[row], rs[r]):
            failures.append(f"rank {r}: model state real {rs[r].tolist()}, phantom row {row} {ps[row].tolist()}")
            break
    return keys


def exact(a, layout):
    rb, rs, phantoms = real_and_phantoms(a, TINY + LAYOUTS[layout])
    failures = []
    for r, (pb, ps, _, _) in phantoms.items():
        keys = compare(r, rb, rs, pb, ps, failures)
        print(f"{layout} rank {r}: {len(keys)} op/level series and the model state compared")
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))


def exact_ep(a, ep):
    """nd ep on tiny-moe: everything exact but all_to_allv, whose bytes are the model's (docs/phantom.md)."""
    rb, rs, phantoms = real_and_phantoms(a, TINY + EP_LAYOUT + [f"scheduler.ep={ep}"])
    # tiny-moe: 8 experts, d = 64, fp32; dp = 4 (tp = pp = cp = 1); the ep groups are ep consecutive ranks, the
    # virtual nodes {0, 1} and {2, 3}.
    experts, hidden, elem, dp = 8, 64, 4, 4
    failures = []
    for r, (pb, ps, load, dropped) in phantoms.items():
        keys = compare(r, rb, rs, pb, ps, failures, skip=("all_to_allv",))
        assert load is not None and dropped is not None, "no steps/moe datasets in the phantom file"
        assert not dropped.any(), f"assignments dropped: {dropped.tolist()} (the count below assumes none)"
        # The rank's own routing per step and MoE block: the stand-in sum over the dp ranks is dp copies of it.
        own = load.reshape(load.shape[0], -1, experts) / dp
        to_rank = own.reshape(own.shape[0], own.shape[1], ep, experts // ep).sum(axis=3)  # [step, block, ep rank]
        me, first = r % ep, r - r % ep
        for level in ("intra", "inter"):
            peers = [p for p in range(ep) if p != me and ((first + p) // 2 == r // 2) == (level == "intra")]
            # Per block and micro-batch, forward and backward each dispatch (the rank's rows to a peer's experts: its
            # own routing) and combine (back to each peer what it sent: taken to be what the rank sends itself).
            want = sum(2 * (to_rank[:, :, p] + to_rank[:, :, me]).sum(axis=1) * hidden * elem for p in peers)
            want = np.zeros(load.shape[0]) if not peers else want
            key = ("all_to_allv", level)
            got = pb[key] if key in pb else np.zeros((load.shape[0], 4), dtype=np.int64)
            for col in range(4):
                if not np.array_equal(got[:, col], want.astype(np.int64)):
                    failures.append(f"rank {r}: all_to_allv/{level} phantom column {col} {got[:, col].tolist()}, "
                                    f"model {want.tolist()}")
                    break
            real = rb[key][:, r].tolist() if key in rb else None
            print(f"ep{ep} rank {r}: all_to_allv/{level} {got[:, 0].tolist()} = model {want.tolist()} "
                  f"(real run: {real})")
        print(f"ep{ep} rank {r}: {len(keys)} other op/level series exact")
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))


def pipeline_wait(a):
    """nd pp2 with emulated links: a phantom stage 1 waits for its absent stage 0 (the bubble); ratios printed."""
    links = ["links.emulate=true", "links.profile=none", "links.comm_to_compute=0", "links.inter.bandwidth_gbps=1",
             "links.inter.latency_us=10", "links.intra.bandwidth_gbps=10", "links.intra.latency_us=2"]
    cfg = TINY + LAYOUTS["nd_pp2"] + links + ["train.steps=4"]
    series = {}
    runs = [("real", None, [a.mpiexec, "-n", "4", a.hzpbench, "run", *sets(cfg)])]
    for r in (0, 3):
        runs.append((f"phantom{r}", r, [a.hzpbench, "run", *sets(cfg + ["topology.phantom_world=4",
                                                                         f"topology.phantom_rank={r}"])]))
    for name, _, cmd in runs:
        out = os.path.join(a.workdir, f"wait_{name}.h5")
        run(cmd + ["--out", out, "--force"], f"the {name} run")
        with h5py.File(out, "r", locking=False) as f:
            series[name] = {k: f["ranks"][k][...] for k in ("step_time_s", "compute_s", "pipeline_wait_s")}
    failures = []
    for r in (0, 3):
        ph, real = series[f"phantom{r}"], series["real"]
        step, compute, wait = ph["step_time_s"][:, r], ph["compute_s"][:, r], ph["pipeline_wait_s"][:, r]
        if (step < compute).any():
            failures.append(f"rank {r}: a phantom step shorter than its compute: {step.tolist()} < {compute.tolist()}")
        if r == 3 and not (wait[1:] > 0).all():
            failures.append(f"rank 3 (stage 1): no pipeline wait after the first step: {wait.tolist()}")
        ratio = step[1:].mean() / real["step_time_s"][1:, r].mean()
        print(f"rank {r}: phantom step {step[1:].mean():.4f} s (pipeline wait {wait[1:].mean():.4f} s), real "
              f"{real['step_time_s'][1:, r].mean():.4f} s (pipeline wait {real['pipeline_wait_s'][1:, r].mean():.4f} "
              f"s): phantom/real {ratio:.2f} (steps 1-3, reported, not asserted)")
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))


def scale(a):
    out = os.path.join(a.workdir, "w64.h5")
    text = run([a.hzpbench, "run", *sets(["model.preset=small", "train.steps=2", "harness.warmup_steps=0",
                                          "scheduler.name=zero3", "topology.ranks_per_node=8", "links.emulate=false",
                                          "topology.phantom_world=64", "topology.phantom_rank=37",
                                          "train.global_batch=64", "train.micro_batch_size=1"]),
                "--out", out, "--force"], "the W = 64 phantom run")
    with h5py.File(out, "r", locking=False) as f:
        at = f.attrs
        assert at["status"] == "ok" if isinstance(at["status"], str) else at["status"].decode() == "ok", at["status"]
        assert int(at["phantom"]) == 1 and int(at["phantom.world_size"]) == 64 and int(at["phantom.rank"]) == 37
        assert int(at["loss.comparable"]) == 0 and int(at["world_size"]) == 64
        assert f["ranks/step_time_s"].shape == (2, 64), f["ranks/step_time_s"].shape
        loss = f["steps/loss"][...]
        assert np.isfinite(loss).all(), loss
    assert "not comparable" in text, text[-2000:]
    print(f"W = 64 rank 37: ok, loss {loss.tolist()}")


def links(a):
    common = TINY + ["scheduler.name=zero3", "train.steps=3",
                          "topology.phantom_world=4", "topology.phantom_rank=0"]
    slow = ["links.emulate=true", "links.profile=none", "links.comm_to_compute=0", "links.inter.bandwidth_gbps=0.02",
            "links.inter.latency_us=0", "links.intra.bandwidth_gbps=1000", "links.intra.latency_us=0"]
    times = {}
    for name, extra in (("off", []), ("on", slow)):
        out = os.path.join(a.workdir, f"links_{name}.h5")
        run([a.hzpbench, "run", *sets(common + extra), "--out", out, "--force"], f"the phantom run, links {name}")
        with h5py.File(out, "r", locking=False) as f:
            step = f["ranks/step_time_s"][...][:, 0]
            inter = sum(f["comm"][op]["inter"]["bytes"][...][:, 0] for op in f["comm"] if "inter" in f["comm"][op])
            times[name] = (step, inter)
    step, inter = times["on"]
    bound = inter / 0.02e9
    print(f"links on: step {step.tolist()} s, inter-node bytes {inter.tolist()}, bound {bound.tolist()} s; "
          f"off: {times['off'][0].tolist()} s")
    assert inter.min() > 0, "no inter-node bytes"
    assert (step >= 0.95 * bound).all(), "a step shorter than its inter-node bytes over the bandwidth"
    assert step.min() > times["off"][0].max(), "emulation did not hold the calls"


# The GPU checks' layouts (docs/phantom.md, "On the GPU"): W = 8 as two nodes of 4, the z-groups inside a node.
CUDA_LAYOUTS = {
    "zero3": ["scheduler.name=zero3"],
    "asynchzp": ["scheduler.name=asynchzp", "scheduler.z1=8", "scheduler.z2=4", "scheduler.z3=4"],
    "nd_pp2": ["scheduler.name=nd", "scheduler.pp=2"],  # the pipeline's boundary messages on the device
    "nd_cp2": ["scheduler.name=nd", "scheduler.cp=2"],  # ring attention's point-to-point batches on the device
    # tp > 1 on the device: the model's tp collectives kept on the stream to the step's end, the vocabulary-parallel
    # kernels, the distinct-piece norm over tp (the tp pair inside a node of 4)
    "nd_tp2": ["scheduler.name=nd", "scheduler.tp=2"],
}
CUDA_PHANTOM = ["model.preset=tiny", "train.steps=2", "harness.warmup_steps=0", "links.emulate=false",
                "train.global_batch=16", "train.micro_batch_size=1", "topology.phantom_world=8",
                "topology.phantom_rank=3", "topology.ranks_per_node=4"]


def cuda_exact(a, layout):
    if e2e.cuda_devices() == 0:
        print("no CUDA device visible: skipped")
        sys.exit(77)
    paths = {}
    for backend in ("cpu", "cuda"):
        paths[backend] = os.path.join(a.workdir, f"{layout}_{backend}.h5")
        run([a.hzpbench, "run", *sets(CUDA_PHANTOM + CUDA_LAYOUTS[layout] + [f"backend={backend}"]), "--out",
             paths[backend], "--force"], f"the {backend} phantom run of {layout}")
    compare_backends(paths["cpu"], paths["cuda"], layout)


def compare_backends(cpu_path, cuda_path, what):
    """The phantom run on the GPU against the same phantom run on the CPU: bytes and model state equal."""
    files = {}
    for backend, path in (("cpu", cpu_path), ("cuda", cuda_path)):
        with h5py.File(path, "r", locking=False) as f:
            memory = f.attrs["device.memory"]
            files[backend] = (comm_bytes(f), f["memory/model_state_bytes"][...], f["steps/loss"][...],
                              memory.decode() if isinstance(memory, bytes) else str(memory))
    (cb, cs, _, _), (gb, gs, gl, mem) = files["cpu"], files["cuda"]
    layout = what
    failures = []
    if not cb:
        failures.append("the CPU phantom run recorded no bytes")
    for k in sorted(set(cb) | set(gb)):
        if k not in cb or k not in gb or not np.array_equal(cb[k], gb[k]):
            failures.append(f"{k[0]}/{k[1]}: cpu {cb.get(k, np.array([])).tolist()}, cuda {gb.get(k, np.array([])).tolist()}")
    if not np.array_equal(cs, gs):
        failures.append(f"model state: cpu {cs.tolist()}, cuda {gs.tolist()}")
    if mem != "cuda:0":
        failures.append(f"the GPU run's device.memory is {mem!r}")
    if not np.isfinite(gl).all():
        failures.append(f"GPU losses {gl.tolist()}")
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))
    print(f"{layout}: {len(cb)} op/level series and the model state equal on cpu and cuda; cuda losses {gl.tolist()}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        # scripts/gpu_phantom_check's files, compared where h5py is: compare CPU.h5 CUDA.h5
        compare_backends(sys.argv[2], sys.argv[3], os.path.basename(sys.argv[3]))
        return 0
    # run_e2e_test's argument parsing and dispatch, over this script's scenarios (exact_<layout>, exact_nd_ep<P>,
    # scale, links, pipeline_wait, cuda_exact_<layout>).
    scenarios = {f"scenario_exact_{k}": (lambda k=k: exact(e2e.ARGS, k)) for k in LAYOUTS}
    scenarios.update(scenario_scale=lambda: scale(e2e.ARGS), scenario_links=lambda: links(e2e.ARGS),
                     scenario_exact_nd_ep2=lambda: exact_ep(e2e.ARGS, 2),
                     scenario_exact_nd_ep4=lambda: exact_ep(e2e.ARGS, 4),
                     scenario_pipeline_wait=lambda: pipeline_wait(e2e.ARGS))
    scenarios.update({f"scenario_cuda_exact_{k}": (lambda k=k: cuda_exact(e2e.ARGS, k)) for k in CUDA_LAYOUTS})
    return e2e.main(scenarios)


if __name__ == "__main__":
    sys.exit(main())
