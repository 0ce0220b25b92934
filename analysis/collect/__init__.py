"""collect: every results file of a sweep folder into one table (CSV and Markdown), one row per run:
the configuration axes, medians and spreads of the step metrics, memory, final loss and status.
`python3 -m analysis.collect results/<sweep> --csv out.csv --md out.md` (docs/sweeps.md)."""
