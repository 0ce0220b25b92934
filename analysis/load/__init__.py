"""load: results files into pandas frames (one row per run, and per run × step × rank), the one reader the
collect, figures and report commands share. `analysis.load.load(["results/<sweep>"])`."""
from .results import Results, load  # noqa: F401
from .results_file import ResultsFileError, Run, open_run  # noqa: F401
