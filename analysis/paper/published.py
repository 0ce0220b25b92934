"""The paper's own numbers (arXiv 2510.20111, Tables 2-5), printed beside the small-scale analogues so a
reader compares shapes of results, never absolute values: the paper ran 256-1024 accelerators at 300+
TFLOP/s each; the analogues run a few CPU processes."""
from __future__ import annotations

import pandas as pd

TABLES = {
    "table2": pd.DataFrame([
        ("Seed-OSS-9B-Base", "AsyncHZP Z1=64, Z2=Z3=8, CP=8", "40.41%", "61.57 GB", "119.5%"),
        ("Seed-OSS-9B-Base", "ND: TP=8", "33.83%", "52.58 GB", "100.0%"),
        ("Seed-OSS-36B-Base", "AsyncHZP Z1=64, Z2=Z3=8, PP=4, CP=8", "46.26%", "57.98 GB", "113.2%"),
        ("Seed-OSS-36B-Base", "ND: TP=8, PP=4", "40.85%", "52.34 GB", "100.0%"),
        ("MoE-100B", "AsyncHZP Z1=64, Z2=Z3=8, PP=6, CP=8", "27.10%", "52.70 GB", "110.2%"),
        ("MoE-100B", "ND: EP=8, PP=6, CP=8", "24.58%", "57.74 GB", "100.0%"),
    ], columns=["model", "strategy", "MFU", "memory", "speedup"]),
    "table3": pd.DataFrame([
        ("Z1=64, Z2=Z3=8, PP=8", "on", "44.40%", "102.9%"),
        ("Z1=64, Z2=Z3=8, PP=8", "off (vanilla)", "43.12%", "100.0%"),
        ("Z1=256, Z2=Z3=8, CP=8", "on", "49.50%", "100.3%"),
        ("Z1=256, Z2=Z3=8, CP=8", "off", "49.32%", "100.0%"),
    ], columns=["strategy", "async", "MFU", "speedup"]),
    "table4": pd.DataFrame([
        ("8K", "AsyncHZP Z1=256, Z2=Z3=8, CP=8", "49.50%", "63.87 GB", "115.2%"),
        ("8K", "ND: TP=8", "42.98%", "58.46 GB", "100.0%"),
        ("32K", "AsyncHZP Z1=64, Z2=Z3=8, PP=4, CP=8", "46.26%", "57.98 GB", "113.2%"),
        ("32K", "ND: TP=8, PP=4", "40.85%", "52.34 GB", "100.0%"),
        ("128K", "AsyncHZP Z1=64, Z2=Z3=8, PP=4, CP=8", "33.64%", "59.42 GB", "116.7%"),
        ("128K", "ND: TP=8, PP=4, CP=8", "28.82%", "62.42 GB", "100.0%"),
    ], columns=["context", "strategy", "MFU", "memory", "speedup"]),
    "table5": pd.DataFrame([
        ("256", "46.26%", "100.0%"), ("512", "45.57%", "98.51%"), ("1024", "42.15%", "91.12%"),
    ], columns=["cards", "MFU", "linearity"]),
}
