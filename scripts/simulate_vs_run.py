#!/usr/bin/env python3
"""Simulated against emulated (docs/simulate.md "Validation"): for each scheduler, an emulated run under mpiexec
(`hzpbench run`, links emulated) and `hzpbench simulate` of the same configuration on the links that run used
(its recorded bandwidths and latencies, so both are charged the same links; the simulator's compute comes from its
own calibration). Prints, per scheduler, simulated / measured for the step time (median after the warm-up) and the
exposed communication (and the pipeline wait, the bubble, where the run has one), and whether the bytes per op,
level and rank of the simulated step equal the measured last step's; with several measured steps, their range of
step time and exposed communication beside the medians (one step of an async engine can read 10% off). With stages, also the ranks' range of exposed
communication and pipeline wait, measured (last step) and simulated: a stage's replicas split their idle time
differently (docs/simulate.md "Validation"); the ratios compare the means over ranks. `--layouts model` runs the tensor-, context-,
pipeline- and expert-parallel layouts (nd tp2, cp2, pp2 over dp2, nd ep2 × dp2 on the preset's MoE twin, tiny-moe
or small-moe, with and without the distributed optimizer; asynchzp cp2, pp2)
instead of the data-parallel ones. The expert all-to-all-v's bytes depend on the routing, which the simulator takes
at the balanced expectation (every expert chosen equally often): they are compared summed over the ranks, as a ratio.

--unit-sleep-ms MS sets the benchmark hook scheduler.debug_unit_sleep_ms (and HZPBENCH_BENCHMARK_HOOKS=1) for the
run and the simulation alike: every block's forward and backward sleeps MS after its compute, in the run's step and
in the simulator's calibration, so a unit's time is known and costs no CPU. With a sleep well above the preset's own
compute (tiny: 20-50 ms), 8 ranks on 2 cores measure the model's step instead of the machine's contention, and the
run derives its links from that unit time (H100-ratio links to the step it takes). Bytes do not depend on it.

--check (the CTest tests simulate_vs_run_np4 and simulate_vs_run_model_np4): exit 1 unless every byte count is
equal (the all-to-all-v's summed bytes within [1/2, 2]: an untrained router sends an uneven share of its rows to the
other ranks); the timing ratios are printed, not checked. --check-times also requires the step-time and
exposed-communication ratios to lie in [1/3, 3]: for an idle machine only, since a test never asserts on a duration
(CI shares 2 cores between the ranks, their threads, the calibration and other work, and the model-layout ratios left
[1/3, 3] once under a concurrent build); the bytes do not move at all.

    scripts/simulate_vs_run.py --hzpbench build/bin/hzpbench --ranks 4 --preset tiny
    scripts/simulate_vs_run.py --hzpbench build/bin/hzpbench --ranks 4 --preset small --steps 2 --layouts model
"""
import argparse
import os
import statistics
import subprocess
import sys

import h5py

LAYOUTS = {  # name -> extra --set arguments (W = 4 in two nodes of 2; at W = 8 the data-parallel degree doubles)
    "zero3": ["scheduler.name=zero3"],
    "hsdp": ["scheduler.name=hsdp", "scheduler.group_size=2"],
    "ddp": ["scheduler.name=ddp"],
    "asynchzp-async": ["scheduler.name=asynchzp", "scheduler.z1=4", "scheduler.z2=2", "scheduler.z3=2"],
    "asynchzp-inline": ["scheduler.name=asynchzp", "scheduler.z1=4", "scheduler.z2=2", "scheduler.z3=2",
                        "scheduler.async=false"],
    # Tensor, context and pipeline parallelism (run with --layouts; the stages are the outermost mesh axis, so pp2
    # puts one stage on each virtual node, tp2 and cp2 stay inside a node).
    "nd-tp2": ["scheduler.name=nd", "scheduler.tp=2"],
    "nd-cp2": ["scheduler.name=nd", "scheduler.cp=2"],
    "nd-pp2": ["scheduler.name=nd", "scheduler.pp=2"],
    "asynchzp-cp2": ["scheduler.name=asynchzp", "scheduler.cp=2", "scheduler.z1=4", "scheduler.z2=2", "scheduler.z3=2"],
    "asynchzp-pp2": ["scheduler.name=asynchzp", "scheduler.pp=2", "scheduler.z1=2", "scheduler.z2=2", "scheduler.z3=2"],
    # Expert parallelism: the preset's MoE twin (MOE_PRESETS), its 8 experts over ep groups of 2 (inside a node), 2
    # expert-data ranks across nodes.
    "nd-ep2": ["scheduler.name=nd", "scheduler.ep=2"],
    "nd-ep2-do": ["scheduler.name=nd", "scheduler.ep=2", "scheduler.distributed_optimizer=true"],
}
MOE_LAYOUTS = {"nd-ep2", "nd-ep2-do"}
MOE_PRESETS = {"tiny": "tiny-moe", "small": "small-moe"}  # the dense preset's shape with experts
DEFAULT_LAYOUTS = ["zero3", "hsdp", "ddp", "asynchzp-async", "asynchzp-inline"]
MODEL_LAYOUTS = ["nd-tp2", "nd-cp2", "nd-pp2", "nd-ep2", "nd-ep2-do", "asynchzp-cp2", "asynchzp-pp2"]
ROUTED = "all_to_allv"  # bytes set by the routing: compared summed over ranks and levels


def sets(pairs):
    out = []
    for p in pairs:
        out += ["--set", p]
    return out


def comm_bytes(f, row):
    """{(op, level): [bytes per rank]} of one row of comm/*/*/bytes."""
    out = {}
    for op in f["comm"]:
        for level in f["comm"][op]:
            out[(op, level)] = [int(v) for v in f["comm"][op][level]["bytes"][row]]
    return out


def spread(f, row):
    """The ranks' range of exposed communication and pipeline wait in one row (seconds)."""
    e, p = f["ranks/exposed_comm_s"][row], f["ranks/pipeline_wait_s"][row]
    return f"exposed {min(e):.2f}-{max(e):.2f} s, pipeline wait {min(p):.2f}-{max(p):.2f} s"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hzpbench", default="build/bin/hzpbench")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layouts", default=",".join(DEFAULT_LAYOUTS),
                    help="comma-separated names of LAYOUTS, or 'model' for the tp/cp/pp ones")
    ap.add_argument("--dir", default="results/simulate_vs_run")
    ap.add_argument("--unit-sleep-ms", type=float, default=0,
                    help="scheduler.debug_unit_sleep_ms for the run and the simulation (a benchmark hook)")
    ap.add_argument("--run-set", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra --set for the run only (e.g. output.trace=true); repeatable")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--check-times", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    common = [f"model.preset={a.preset}", f"train.steps={a.steps}", "harness.warmup_steps=1",
              f"topology.ranks_per_node={a.ranks_per_node}"]
    env = dict(os.environ)
    if a.unit_sleep_ms > 0:  # the hook is refused without the variable, by `run` and `simulate` alike
        common.append(f"scheduler.debug_unit_sleep_ms={a.unit_sleep_ms!r}")
        env["HZPBENCH_BENCHMARK_HOOKS"] = "1"
    failures, notes = [], []
    print(f"{'layout':18} {'step sim/meas':>14} {'exposed sim/meas':>17} {'pipeline sim/meas':>18}  bytes")
    names = MODEL_LAYOUTS if a.layouts == "model" else a.layouts.split(",")
    for name in names:
        cfg = common + LAYOUTS[name]
        if name in MOE_LAYOUTS:
            cfg.append(f"model.preset={MOE_PRESETS.get(a.preset, a.preset)}")
        run_h5 = os.path.join(a.dir, f"run-{name}.h5")
        sim_h5 = os.path.join(a.dir, f"sim-{name}.h5")
        subprocess.run([a.mpiexec, "-n", str(a.ranks), a.hzpbench, "run", *sets(cfg), *sets(a.run_set),
                        "--out", run_h5, "--force"],
                       check=True, stdout=subprocess.DEVNULL, timeout=1800, env=env)
        with h5py.File(run_h5, "r", locking=False) as f:
            at = f.attrs
            links = [f"links.profile=none", "links.comm_to_compute=0",
                     f"links.intra.bandwidth_gbps={float(at['links.intra_bandwidth_gbps'])!r}",
                     f"links.inter.bandwidth_gbps={float(at['links.inter_bandwidth_gbps'])!r}",
                     f"links.intra.latency_us={float(at['links.intra_latency_us'])!r}",
                     f"links.inter.latency_us={float(at['links.inter_latency_us'])!r}"]
            rows = f["steps/step_time_s"].shape[0]
            measured_step = statistics.median(f["steps/step_time_s"][1:])
            measured_exposed = statistics.median(f["ranks/exposed_comm_s"][1:].mean(axis=1))
            measured_pipeline = statistics.median(f["ranks/pipeline_wait_s"][1:].mean(axis=1))
            measured_spread = spread(f, rows - 1)
            steps_s, exposed_s = f["steps/step_time_s"][1:], f["ranks/exposed_comm_s"][1:].mean(axis=1)
            measured_bytes = comm_bytes(f, rows - 1)
        subprocess.run([a.hzpbench, "simulate", *sets(cfg + [f"topology.world_size={a.ranks}"] + links),
                        "--out", sim_h5, "--force"], check=True, stdout=subprocess.DEVNULL, timeout=600, env=env)
        with h5py.File(sim_h5, "r", locking=False) as g:
            sim_step = float(g["steps/step_time_s"][0])
            sim_exposed = float(g["ranks/exposed_comm_s"][0].mean())
            sim_pipeline = float(g["ranks/pipeline_wait_s"][0].mean())
            sim_spread = spread(g, 0)
            sim_bytes = comm_bytes(g, 0)
        nonzero = lambda d: {k: v for k, v in d.items() if any(v) and k[0] != ROUTED}
        same = nonzero(measured_bytes) == nonzero(sim_bytes)
        routed = lambda d: sum(sum(v) for k, v in d.items() if k[0] == ROUTED)
        r_routed = routed(sim_bytes) / routed(measured_bytes) if routed(measured_bytes) > 0 else None
        r_step, r_exp = sim_step / measured_step, sim_exposed / measured_exposed
        r_pipe = sim_pipeline / measured_pipeline if measured_pipeline > 0 else float("nan")
        print(f"{name:18} {r_step:14.3f} {r_exp:17.3f} {r_pipe:18.3f}  {'equal' if same else 'DIFFER'}"
              + (f" (all-to-all-v sim/meas {r_routed:.3f})" if r_routed is not None else ""), flush=True)
        if len(steps_s) > 1:  # the medians' spread over the measured steps: how far one step may read off
            print(f"{'':18} measured over {len(steps_s)} steps: step {min(steps_s):.2f}-{max(steps_s):.2f} s "
                  f"(median {measured_step:.2f}), exposed {min(exposed_s):.2f}-{max(exposed_s):.2f} s "
                  f"(median {measured_exposed:.2f}); simulated step {sim_step:.2f} s, exposed {sim_exposed:.2f} s")
        if measured_pipeline > 0:  # how far a stage's replicas drift apart: their split of the idle time
            print(f"{'':18} per rank, measured last step / simulated: {measured_spread} / {sim_spread}")
        if r_routed is not None and not (1 / 2 <= r_routed <= 2):
            failures.append(f"{name}: simulated/measured all-to-all-v bytes = {r_routed:.3f}, outside [1/2, 2]")
        if not same:
            failures.append(f"{name}: bytes per op/level/rank differ:\n  measured {nonzero(measured_bytes)}\n"
                            f"  simulated {nonzero(sim_bytes)}")
        for what, r in (("step time", r_step), ("exposed communication", r_exp)):
            if not (1 / 3 <= r <= 3):
                (failures if a.check_times else notes).append(f"{name}: simulated/measured {what} = {r:.3f}, outside [1/3, 3]")
    if notes:
        print("\n".join(notes), file=sys.stderr)
    if failures:
        print("\n".join(failures), file=sys.stderr)
    return 1 if (a.check or a.check_times) and failures else 0


if __name__ == "__main__":
    sys.exit(main())
