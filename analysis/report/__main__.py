"""`python3 -m analysis.report`."""
import sys

from .cli import main

sys.exit(main())
