"""report: one Markdown and HTML report of a sweep: its configuration axes, tables, every figure inline,
provenance and the runs that did not finish ok. `python3 -m analysis.report results/<sweep> [--out DIR]`
(docs/analysis.md)."""
