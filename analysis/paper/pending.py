"""The paper's rows that hzpbench cannot run yet, per reproduced table: each names what it needs (a
scheduler name, a capability such as AsyncHZP with context parallelism, or a tool) so a report lists it as
pending while that is missing, and says it is available once the program has it (scripts/reproduce's
available()). Never replaced by a stand-in result. A row needing several parts names the last of them to land. Every
capability named here exists now (nd's tensor, pipeline and context parallelism, AsyncHZP with context parallelism
and pipeline stages, MoE, the scale simulator), so a report lists these rows as available; the ones at 256 cards
and more are given in form by `hzpbench simulate` (scripts/simulate_table5), not run."""
from __future__ import annotations

# The capabilities, as scripts/reproduce detects them from `hzpbench list` (the scheduler keys that enable them
# in nd).
TENSOR, PIPELINE, CONTEXT = "tensor parallelism", "pipeline parallelism", "context parallelism"
# AsyncHZP composed with pipeline stages: detected by `hzpbench validate` accepting asynchzp with scheduler.pp = 2
# at 4 ranks. The rows it unblocked run in the table1 plans and the table2, table3 and table4 specs.
ASYNC_PIPELINE = "AsyncHZP with pipeline stages"
# AsyncHZP composed with context parallelism (nd's scheduler.cp alone does not give it): detected by `hzpbench
# validate` accepting asynchzp with scheduler.cp = 2 at 4 ranks. The rows it unblocked run in the table2, table3
# and table4 specs; none waits for it any more.
ASYNC_CONTEXT = "AsyncHZP with context parallelism"

# (paper row, what it needs)
PENDING: dict[str, list[tuple[str, str]]] = {
    "table1": [],
    "table2": [
        ("MoE-100B, ND: EP = 8, PP = 6, CP = 8; AsyncHZP with PP = 6, CP = 8", "moe"),
    ],
    "table3": [],
    "table4": [],
    "table5": [
        ("Seed-OSS-36B, AsyncHZP Z1 = 64, Z2 = Z3 = 8, PP = 4, CP = 8 at 256 / 512 / 1024 cards (MFU, linearity)",
         "scale simulator"),
        ("The best ND strategy's linearity from 256 to 1024 cards (88.37%)", "scale simulator"),
    ],
    "ablation": [],
}


def pending(part: str, available: set[str]) -> list[dict]:
    """The part's rows whose need is not in `available` (registered scheduler names, tools)."""
    return [{"row": row, "needs": need} for row, need in PENDING.get(part, []) if need not in available]


def now_available(part: str, available: set[str]) -> list[dict]:
    return [{"row": row, "needs": need} for row, need in PENDING.get(part, []) if need in available]
