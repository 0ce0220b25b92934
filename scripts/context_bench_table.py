#!/usr/bin/env python3
"""Table of the long-context benchmark (scripts/context_bench.sh): one row per results file <cfg>_T<len>.h5.

Over the measured steps (after harness.warmup_steps), each the median over steps of the mean over ranks: the step
time (max over ranks) and its ratio to asynchzp's at the same T (side by side in one sweep; 4 ranks share 2 cores
here, so only ratios mean anything), compute and exposed communication as shares of the step, the bytes a rank
sends per step inside and across the virtual nodes, split into collectives (tensor parallelism's, the engines') and
point-to-point messages (here only ring attention's: no pipeline), and the peak activation memory (tag activation,
max over ranks and steps) and peak allocated memory per rank.
"""
import sys
from pathlib import Path

import h5py
import numpy as np

ORDER = ["nd_cp4", "nd_cp2_tp2", "nd_tp4", "asynchzp", "asynchzp_cp2", "asynchzp_cp4"]
LABEL = {"nd_cp4": "nd cp4", "nd_cp2_tp2": "nd cp2×tp2 SP", "nd_tp4": "nd tp4 SP (across nodes)",
         "asynchzp": "asynchzp z1=4 z2=z3=2", "asynchzp_cp2": "asynchzp cp2, z1=4 z2=z3=cp=2",
         "asynchzp_cp4": "asynchzp cp4, z1=z2=z3=cp=4"}


def row(path):
    with h5py.File(path, "r") as f:
        warm = int(f.attrs["warmup_steps"]) if "warmup_steps" in f.attrs else 1
        rank = lambda name: f[f"ranks/{name}"][warm:]
        t = rank("step_time_s")
        share = lambda name: float(np.median(np.mean(rank(name) / t, axis=1)))
        by = {}
        for kind in ("coll", "p2p"):
            for level in ("intra", "inter"):
                total = 0
                for op in f["comm"]:
                    k = f"comm/{op}/{level}/bytes"
                    if k in f and (op == "send") == (kind == "p2p"):
                        total = total + f[k][warm:]
                by[kind, level] = float(np.median(np.mean(total, axis=1))) if not np.isscalar(total) else 0.0
        return dict(step=float(np.median(f["steps/step_time_s"][warm:])), compute=share("compute_s"),
                    exposed=share("exposed_comm_s"), by=by,
                    act=float(np.max(rank("mem_activation_peak_bytes"))), peak=float(np.max(rank("mem_peak_bytes"))),
                    loss=float(f["steps/loss"][-1]), status=str(f.attrs.get("status", "")))


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "results/context_bench")
    lengths = sorted({int(p.stem.rsplit("_T", 1)[1]) for p in out.glob("*_T*.h5")})
    print("| T | layout | step time | vs asynchzp | compute | exposed comm | collectives intra / inter MB | "
          "ring p2p intra / inter MB | activation peak MiB | peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for T in lengths:
        rows = {c: row(out / f"{c}_T{T}.h5") for c in ORDER if (out / f"{c}_T{T}.h5").exists()}
        base = rows.get("asynchzp", {}).get("step")
        for c, x in rows.items():
            ratio = f"{x['step'] / base:.2f}×" if base else "-"
            print(f"| {T} | {LABEL[c]} | {x['step']:.1f} s | {ratio} | {100 * x['compute']:.1f}% | "
                  f"{100 * x['exposed']:.1f}% | {x['by']['coll', 'intra'] / 1e6:.1f} / {x['by']['coll', 'inter'] / 1e6:.1f} | "
                  f"{x['by']['p2p', 'intra'] / 1e6:.1f} / {x['by']['p2p', 'inter'] / 1e6:.1f} | "
                  f"{x['act'] / 2**20:.0f} | {x['peak'] / 2**20:.0f} |")


if __name__ == "__main__":
    main()
