"""`python3 -m analysis.collect` (from the repository root)."""
import sys

from .cli import main

sys.exit(main())
