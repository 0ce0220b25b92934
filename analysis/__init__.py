"""analysis/: Python that reads hzpbench results files (HDF5, docs/results-schema.md) into tables and figures.
It reads files only; it never imports or runs the harness."""
