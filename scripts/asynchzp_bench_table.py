#!/usr/bin/env python3
"""Table of the asynchzp benchmark (scripts/asynchzp_bench.sh): one row per results file <cfg>_r<ratio>.h5.
Pipeline wait (nd with pp) is its own share of the step; peak memory is given per rank (ranks 0-1 are the first
pipeline stage in the pp layouts, 2-3 the second).

Ratios over the measured steps (after harness.warmup_steps), each the median over steps of the mean over
ranks: compute (forward + backward wall) and compute CPU (the compute thread's CPU time) over the step
time; exposed communication over the step time and its transfer part (after every peer joined: on an
oversubscribed machine the join part is mostly waiting for descheduled peers); exposed over the summed
duration of the scheduler's collectives (how much of its communication the step waits for). Bytes are per
rank and step (mean over ranks), memory the peak over ranks, pool figures the peak occupancy and stalls. For an
MoE model (steps/moe/* present) two more columns: the all-to-all share (the time ranks spend in all_to_all and
all_to_allv over the step time) and the load balance (the busiest expert's load over the mean, the median over
steps of the worst block).
"""
import sys
from pathlib import Path

import h5py
import numpy as np

ORDER = ["zero3", "hsdp", "asynchzp_inline", "asynchzp_p1", "asynchzp_p2", "asynchzp_p2_split", "asynchzp_p2_a2a", "nd_tp2", "nd_tp2_sp", "nd_tp2_do",
         "nd_tp2_sp_do", "nd_pp2_gpipe", "nd_pp2", "nd_pp2_int", "nd_tp2_pp2", "nd_ep2", "nd_ep4"]
LABEL = {"zero3": "zero3", "hsdp": "hsdp Z=2", "asynchzp_inline": "asynchzp async off",
         "asynchzp_p1": "asynchzp async prefetch 1", "asynchzp_p2": "asynchzp async prefetch 2",
         "asynchzp_p2_split": "asynchzp async prefetch 2 tied_split rows_allgather",
         "asynchzp_p2_a2a": "asynchzp async prefetch 2 tied_split rows_alltoall",
         "nd_tp2": "nd tp2×dp2", "nd_tp2_sp": "nd tp2×dp2 SP", "nd_tp2_do": "nd tp2×dp2 dist-opt",
         "nd_tp2_sp_do": "nd tp2×dp2 SP dist-opt", "nd_pp2": "nd pp2×dp2 1F1B", "nd_pp2_gpipe": "nd pp2×dp2 GPipe",
         "nd_pp2_int": "nd pp2×dp2 interleaved v=2", "nd_tp2_pp2": "nd tp2×pp2 1F1B", "nd_ep2": "nd ep2×dp2",
         "nd_ep4": "nd ep4"}


def ranks(f, name):
    return f[f"ranks/{name}"][:] if f"ranks/{name}" in f else None


def row(path):
    with h5py.File(path, "r") as f:
        warm = int(f.attrs.get("harness.warmup_steps", 1)) if "harness.warmup_steps" in f.attrs else 1
        t = ranks(f, "step_time_s")[warm:]
        share = lambda name: float(np.median(np.mean(ranks(f, name)[warm:] / t, axis=1))) if ranks(f, name) is not None else float("nan")
        exposed = ranks(f, "exposed_comm_s")[warm:]
        comm = ranks(f, "comm_time_s")
        of_comm = float(np.median(np.mean(exposed / np.maximum(comm[warm:], 1e-12), axis=1))) if comm is not None else float("nan")
        by = {}
        for level in ("intra", "inter"):
            total = 0
            for op in f["comm"]:
                k = f"comm/{op}/{level}/bytes"
                if k in f:
                    total = total + f[k][warm:]
            by[level] = float(np.median(np.mean(total, axis=1))) if not np.isscalar(total) else 0.0
        step = float(np.median(f["steps/step_time_s"][warm:]))
        peak = float(np.max(ranks(f, "mem_peak_bytes")[warm:]))
        slack = float(np.median(ranks(f, "slack")[warm:]))
        occ = ranks(f, "pool_occupancy")
        stalls = ranks(f, "pool_stalls")
        state = f["memory/model_state_bytes"][:] if "memory/model_state_bytes" in f else None
        peaks = np.max(ranks(f, "mem_peak_bytes")[warm:], axis=0)
        a2a = None
        for op in ("all_to_all", "all_to_allv"):
            for level in ("intra", "inter"):
                k = f"comm/{op}/{level}/time_s"
                if k in f:
                    a2a = f[k][warm:] if a2a is None else a2a + f[k][warm:]
        moe = "steps/moe/load_max_over_mean" in f
        a2a_share = float(np.median(np.mean(a2a / t, axis=1))) if a2a is not None else (0.0 if moe else float("nan"))
        balance = float(np.median(np.max(f["steps/moe/load_max_over_mean"][warm:], axis=1))) if moe else float("nan")
        return dict(a2a=a2a_share, balance=balance, state=np.max(state, axis=0) if state is not None else None, step=step, compute=share("compute_s"), cpu=share("cpu_time_s"), exposed=share("exposed_comm_s"),
                    pipeline=share("pipeline_wait_s"), peaks=peaks,
                    join=share("join_wait_s"), transfer=share("transfer_wait_s"), of_comm=of_comm,
                    inter=by["inter"], intra=by["intra"], peak=peak, slack=slack,
                    pool=float(np.max(occ[warm:])) if occ is not None else float("nan"),
                    stalls=float(np.sum(stalls[warm:])) if stalls is not None else float("nan"),
                    loss=float(f["steps/loss"][-1]))


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "results/asynchzp_bench")
    rows = [(r, cfg, row(out / f"{cfg}_r{r}.h5")) for r in ("0.5", "1", "2") for cfg in ORDER
            if (out / f"{cfg}_r{r}.h5").exists()]
    moe = any(not np.isnan(x["balance"]) for _, _, x in rows)
    print("| r | scheduler | step time | compute (CPU) | exposed (join, transfer) | exposed / its comm | pipeline wait | "
          "inter / intra MB per rank-step | peak mem per rank (MiB) | model state MiB (param/grad/master/m/v) | slack | pool peak, stalls |"
          + (" all-to-all | load max/mean |" if moe else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if moe else ""))
    for r, cfg, x in rows:
        state = "-" if x["state"] is None else "/".join(f"{b / 2**20:.0f}" for b in x["state"])
        pool = "-" if np.isnan(x["pool"]) or "async" not in LABEL[cfg] or "off" in LABEL[cfg] else f"{100 * x['pool']:.0f}%, {x['stalls']:.0f}"
        print(f"| {r} | {LABEL[cfg]} | {x['step']:.2f} s | {100 * x['compute']:.1f}% ({100 * x['cpu']:.1f}%) | "
              f"{100 * x['exposed']:.1f}% ({100 * x['join']:.1f}%, {100 * x['transfer']:.1f}%) | {100 * x['of_comm']:.0f}% | "
              f"{100 * x['pipeline']:.1f}% | {x['inter'] / 1e6:.1f} / {x['intra'] / 1e6:.1f} | "
              f"{'/'.join(f'{b / 2**20:.0f}' for b in x['peaks'])} | {state} | {x['slack']:.2f} | {pool} |"
              + (f" {100 * x['a2a']:.1f}% | {x['balance']:.2f} |" if moe else ""))


if __name__ == "__main__":
    main()
