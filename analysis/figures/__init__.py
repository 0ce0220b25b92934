"""figures: PNGs (matplotlib, headless) of a sweep's results, each with the numbers it draws beside it as
CSV. `python3 -m analysis.figures results/<sweep> [--out FIGDIR]` (docs/analysis.md)."""
