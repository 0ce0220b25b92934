"""`python3 -m analysis.figures`."""
import sys

from .cli import main

sys.exit(main())
