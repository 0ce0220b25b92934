"""hzpsweep: hzpbench sweeps on Slurm (docs/sweeps.md). Standard library only (Python >= 3.11 for tomllib)."""
