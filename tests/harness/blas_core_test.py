"""hzpbench restarts itself with OPENBLAS_CORETYPE when OpenBLAS fell back to its generic Prescott kernels on a CPU
with AVX2 and FMA (OpenBLAS 0.3.21 does not know the 2-core machines' Emerald Rapids, model 207): on any CPU with
those features a run's results file names a real core in threads.openblas_core, never Prescott; on one without
them the test has nothing to check (exit 77). A core named by the user (OPENBLAS_CORETYPE) is kept as given."""
import os
import subprocess
import sys
import tempfile

import h5py

HZP = sys.argv[1]
flags = set()
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
if not {"avx2", "fma"} <= flags:
    print("the CPU has no AVX2 and FMA: OpenBLAS's generic kernels are its right choice; nothing to check")
    sys.exit(77)


def core(env_extra: dict) -> str:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.h5")
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
        env.update(env_extra)
        p = subprocess.run([HZP, "run", "--out", out, "--set", "model.preset=tiny", "--set", "train.steps=1"],
                           capture_output=True, text=True, env=env, timeout=120)
        if p.returncode != 0:
            sys.exit(f"hzpbench run failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        with h5py.File(out, "r") as h:
            return h.attrs["threads.openblas_core"].decode() if isinstance(h.attrs["threads.openblas_core"], bytes) \
                else str(h.attrs["threads.openblas_core"])


failed = []
got = core({})
if got.lower() == "prescott":
    failed.append(f"a CPU with AVX2 and FMA ran OpenBLAS's generic Prescott kernels (threads.openblas_core = {got})")
given = core({"OPENBLAS_CORETYPE": "Haswell"})
if given.lower() != "haswell":
    failed.append(f"OPENBLAS_CORETYPE=Haswell was not kept: threads.openblas_core = {given}")
if failed:
    sys.exit("\n".join(failed))
print(f"OpenBLAS core: {got} by default, {given} when named")
