"""`python3 -m hzpsweep` (with slurm/ on sys.path): the same as slurm/sweep."""
import sys

from .cli import main

sys.exit(main())
