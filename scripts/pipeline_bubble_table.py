#!/usr/bin/env python3
"""Table of the pipeline-bubble benchmark (scripts/pipeline_bubble.sh): one row per results file
pp<P>_m<M>_<schedule>.h5. The measured bubble is the pipeline-wait share of the step time (per step the mean over
ranks, then the median over the measured steps), beside the schedule's closed form."""
import re
import sys
from pathlib import Path

import h5py
import numpy as np


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "results/pipeline_bubble")
    print(f"| pp | m | schedule | closed form | measured pipeline wait | measured / closed form |")
    print(f"|---:|--:|----------|------------:|-----------------------:|-----------------------:|")
    for path in sorted(out.glob("pp*_m*_*.h5"), key=lambda p: tuple(int(x) for x in re.findall(r"\d+", p.stem)[:2]) + (p.stem,)):
        pp, m, sched = re.match(r"pp(\d+)_m(\d+)_(\w+)", path.stem).groups()
        pp, m = int(pp), int(m)
        v = 2 if sched == "interleaved" else 1
        want = (pp - 1) / (v * m + pp - 1)
        with h5py.File(path, "r") as f:
            warm = 1
            t = f["ranks/step_time_s"][warm:]
            wait = f["ranks/pipeline_wait_s"][warm:]
            got = float(np.median(np.mean(wait / t, axis=1)))
        print(f"| {pp} | {m} | {sched}{' v=2' if v == 2 else ''} | {want:.1%} | {got:.1%} | {got / want:.3f} |")


if __name__ == "__main__":
    main()
