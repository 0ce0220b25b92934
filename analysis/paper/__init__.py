"""paper: what reproducing AsyncHZP (arXiv 2510.20111) needs beyond reading files: the closed forms of
model-state memory (its Table 1), the parsed output of `hzpbench plan`, and the paper's layouts that need
parts of hzpbench that do not exist yet (listed as pending, never faked)."""
