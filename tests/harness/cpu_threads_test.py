"""harness.cpu_threads: with two threads per rank, `pool` (the default) hands them to the intra-op pool and runs
OpenBLAS single-threaded (threads.intra_op = 2, threads.openblas = 1, the header says so); `openblas` keeps
OpenBLAS's own threads (threads.intra_op = 1, threads.openblas = 2); both train tiny to the same losses within
fp32 rounding, since neither split moves a sum across threads; deterministic mode runs one thread either way."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HZP = sys.argv[1]
failed = []


def check(ok, msg):
    if not ok:
        failed.append(msg)


def run(d, name, *sets):
    out = os.path.join(d, name + ".h5")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2")
    argv = [HZP, "run", "--out", out, "--set", "model.preset=tiny", "--set", "train.steps=6",
            "--set", "harness.warmup_steps=1"] + [x for s in sets for x in ("--set", s)]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    with h5py.File(out, "r") as h:
        attrs = {k: h.attrs[k] for k in ("threads.intra_op", "threads.openblas")}
        loss = np.asarray(h["steps/loss"][...], dtype=np.float64)
    return p.stdout, {k: int(v) for k, v in attrs.items()}, loss


with tempfile.TemporaryDirectory() as d:
    out_pool, pool, loss_pool = run(d, "pool")
    out_blas, blas, loss_blas = run(d, "openblas", "harness.cpu_threads=openblas")
    _, det, _ = run(d, "det", "train.deterministic=true")
check(pool == {"threads.intra_op": 2, "threads.openblas": 1}, f"pool: {pool}")
check("2 per rank in the intra-op pool" in out_pool, "the header of the pool run does not name the pool")
check(blas == {"threads.intra_op": 1, "threads.openblas": 2}, f"openblas: {blas}")
check("OpenBLAS 2 per rank" in out_blas, "the header of the openblas run does not name OpenBLAS's threads")
check(det == {"threads.intra_op": 1, "threads.openblas": 1}, f"deterministic: {det}")
check(loss_pool.shape == (6,) and loss_blas.shape == (6,), f"losses {loss_pool.shape}, {loss_blas.shape}")
rel = np.max(np.abs(loss_pool - loss_blas) / np.abs(loss_blas))
check(rel < 1e-5, f"losses differ by {rel:.3g} relative between pool and openblas")
if failed:
    sys.exit("\n".join(failed))
print(f"pool {pool}, openblas {blas}, deterministic {det}; losses agree to {rel:.2g}")
