"""The paper's tables as this sweep reproduces them (arXiv 2510.20111, Tables 1-5, and the shard-granularity
ablation it does not run), each beside the published numbers and followed by the paper's rows that need
parts of hzpbench that do not exist yet (pending, never faked).

Speed-ups are tokens/s ratios of medians over ok runs (the paper's are MFU ratios: the same thing for one
model and batch), against the baseline named in the table; memory is the allocator's peak per rank."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..collect.cli import table_of
from ..figures import memory as memory_figure
from ..load import Results, labels
from ..paper import forms, pending, plans, published
from . import fmt
from .blocks import Bullets, Heading, Table, Text

PARTS = ("table1", "table2", "table3", "table4", "table5", "ablation")
TITLES = {
    "table1": "Table 1: static (model-state) memory per component",
    "table2": "Table 2: AsyncHZP against the other layouts (small-scale analogue)",
    "table3": "Table 3: asynchronous scheduling on and off (small-scale analogue)",
    "table4": "Table 4: context length (small-scale analogue)",
    "table5": "Table 5: cluster scalability",
    "ablation": "Shard-granularity ablation: every (z1, z2, z3), async on and off",
}


def per_config(res: Results) -> pd.DataFrame:
    """One row per configuration with numbers: medians over ok runs, how many ok of how many."""
    t, _ = table_of(res)
    meta = res.runs.set_index("run")
    t["config"] = t["task"].map(meta["config"])
    t["state"] = t["task"].map(meta["state"])
    rows = []
    for config, g in t.groupby("config", sort=False):
        m = meta.loc[g["task"].iloc[0]]
        ok = g[g["state"] == "ok"]
        cfg = {k: labels.plain(v) for k, v in m.items()}
        world = int(m["world_size"] or 1)
        z1, z2, z3 = labels.groups(cfg, world)
        row = {"config": config, "layout": m["layout"], "scheduler": cfg.get("scheduler.name"), "world": world,
               "z1": z1, "z2": z2, "z3": z3, **labels.mesh_degrees(cfg),
               "async": labels.truthy(cfg.get("scheduler.async", True)),
               "pp_reuse": labels.truthy(cfg.get("scheduler.pp_reuse", True)),
               "seq_len": cfg.get("model.seq_len"), "global_batch": cfg.get("train.global_batch"),
               "comm_to_compute": cfg.get("links.comm_to_compute"), "ok": len(ok), "runs": len(g),
               "states": ", ".join(sorted(set(g["state"]))),
               **{c: float(ok[c].median()) if len(ok) and ok[c].notna().any() else math.nan
                  for c in ("tokens_per_s_median", "mfu_median", "exposed_comm_frac_median", "step_time_s_median",
                            "mem_peak_bytes_max")}}
        mem = res.memory[res.memory["run"].isin(g["task"])]
        row["model_state_bytes"] = float(mem.groupby(["run", "rank"])["bytes"].sum().max()) if len(mem) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _ended(r) -> str:
    return f"{r['ok']} of {r['runs']} ok" + ("" if r["ok"] == r["runs"] else f" ({r['states']})")


def _speedup(v: float, base: float) -> str:
    return "–" if not (base and math.isfinite(base) and math.isfinite(v)) else f"{100 * v / base:.1f}%"


def _pending(part: str, available: set[str]) -> list:
    rows = pending.pending(part, available)
    out = []
    if rows:
        out += [Text("Pending: the paper's rows that need parts of hzpbench that do not exist yet (not run, not "
                     "estimated):"), Bullets([f"{r['row']} — needs {r['needs']}" for r in rows])]
    now = pending.now_available(part, available)
    if now:
        out += [Text("Now available but not yet in this part's sweep spec (add them to configs/sweeps/paper/):"),
                Bullets([f"{r['row']} ({r['needs']})" for r in now])]
    return out


def _published(part: str) -> list:
    t = published.TABLES.get(part)
    return [Table(t, f"As published (arXiv 2510.20111, {TITLES[part].split(':')[0]}), for the shape of the "
                     "result only: 256-1024 accelerators against a few CPU processes here.")] if t is not None else []


def table1(res: Results, folder: Path) -> list:
    out = []
    saved = plans.read_saved(folder)
    if saved:
        rows = []
        for p in (p for p in saved if p["state_table"]):
            cfg = {**p["config"], "scheduler.name": p["scheduler"], "train.precision": p["precision"]}
            form = forms.model_state(cfg, p["world_size"], p["num_params"])
            total_form = sum(form.values()) if form else math.nan
            total = p["bytes"].get("total", math.nan)
            rows.append({"layout": p["label"], "scheduler": p["scheduler"], "W": p["world_size"],
                         "N": p["num_params"], **{c: fmt.exact_bytes(p["bytes"].get(c)) for c in forms.COMPONENTS},
                         "total (bytes)": fmt.exact_bytes(total), "total": fmt.nbytes(total),
                         "bytes/parameter": f"{total / p['num_params']:.4g}",
                         "closed form": forms.formula(cfg, p["world_size"]),
                         "closed form (bytes)": fmt.exact_bytes(total_form),
                         "plan − form": fmt.exact_bytes(total - total_form) if form else "–"})
        out.append(Table(pd.DataFrame(rows), "From `hzpbench plan` (computed from the layout alone, exact; "
                                             "bytes per rank of rank 0), beside the closed form of Table 1; "
                                             "plan − form is padding (each segment padded to its group)."))
        out += table2_memory(saved)
    else:
        out.append(Text("No saved plans (plans/*.json, written by scripts/reproduce table1) in this folder."))
    t = memory_figure.table(res)
    if len(t):
        tot = t[t["component"] == "total"]
        rows = [{"configuration": r["config"], "run": r["run"], "precision": r["precision"], "W": r["world_size"],
                 "N": r["num_params"], "measured (bytes)": fmt.exact_bytes(r["measured_bytes"]),
                 "closed form": r["formula"], "closed form (bytes)": fmt.exact_bytes(r["closed_form_bytes"]),
                 "measured − form": fmt.exact_bytes(r["measured_bytes"] - r["closed_form_bytes"]),
                 "as share": fmt.pct((r["measured_bytes"] - r["closed_form_bytes"]) / r["closed_form_bytes"], 3)}
                for _, r in tot.iterrows()]
        out.append(Table(pd.DataFrame(rows), "Measured: model-state bytes the allocator held after step 0 (the "
                                             "rank with the largest total), against the same closed form."))
    return out


def table2_memory(saved: list[dict]) -> list:
    """Table 2's memory column in form: the saved plans that stand for one of its rows (memory_row), model states
    exact from the layout, activations estimated from the model's units over the rank's schedule, each labelled."""
    pub = published.TABLES["table2"]
    published_gb = {f"{r['model']} / {r['strategy']}": r["memory"] for _, r in pub.iterrows()}
    rows = []
    for p in (p for p in saved if p.get("memory_row")):
        act = p.get("activations") or {}
        state = p["bytes"].get("total", math.nan)
        gathered = p.get("gathered_peak") or 0
        peak = act.get("peak", math.nan)
        recompute = str(p["config"].get("train.recompute", False)).lower() == "true"
        rows.append({"Table 2 row": p["memory_row"], "layout": p["label"], "rank": p["rank"],
                     "recompute": "yes" if recompute else "no",
                     "micro-batches (in flight)": f"{p.get('micro_batches')} ({p.get('in_flight')})",
                     "model states": fmt.nbytes(state), "gathered params": fmt.nbytes(gathered),
                     "activations / micro-batch (est.)": fmt.nbytes(act.get("per_micro_batch")),
                     "activations at peak (est.)": fmt.nbytes(peak),
                     "sum": fmt.nbytes(state + gathered + peak),
                     "published (all memory)": published_gb.get(p["memory_row"], "–")})
    if not rows:
        return []
    order = {k: i for i, k in enumerate(published_gb)}  # the paper's row order, then first stage before last
    df = pd.DataFrame(rows)
    df = df.assign(_o=df["Table 2 row"].map(lambda r: order.get(r, len(order)))).sort_values(
        ["_o", "rank", "recompute"], kind="stable").drop(columns="_o")
    return [Table(df,
                  "Table 2's memory column in form, at the paper's 256 cards in nodes of 8 (`hzpbench plan`): model "
                  "states per rank exact from the layout; gathered parameters the rank holds at once beside them "
                  "(asynchzp; with pp_reuse a stage's blocks stay gathered); activations **estimated** from the "
                  "model's own description of what each unit holds (checked against the allocator in tests; kernel "
                  "scratch, communication buffers and fragmentation not included), one micro-batch's and the peak "
                  "over the rank's schedule (1F1B). The paper does not say whether its runs recomputed, so both are "
                  "shown; its memory figure is everything the device held.")]


def _versus(pc: pd.DataFrame, base_mask, group_cols: list[str], title_cols: list[str],
            name: str = "config") -> pd.DataFrame:
    """One row per configuration with its speed-up against the baseline of its group (the rows sharing
    group_cols); title_cols lead the row, `name` names the configuration (its label, or just its layout when
    the title columns say the rest)."""
    rows = []
    for _, r in pc.iterrows():
        g = pc
        for c in group_cols:
            g = g[g[c] == r[c]]
        base = g[base_mask(g)]
        b = float(base["tokens_per_s_median"].iloc[0]) if len(base) else math.nan
        rows.append({**{c: r[c] for c in title_cols}, "configuration": r[name], "ended": _ended(r),
                     "MFU": fmt.pct(r["mfu_median"], 2), "tokens/s": fmt.num(r["tokens_per_s_median"]),
                     "exposed comm": fmt.pct(r["exposed_comm_frac_median"]),
                     "peak memory/rank": fmt.nbytes(r["mem_peak_bytes_max"]),
                     "speedup": _speedup(r["tokens_per_s_median"], b)})
    return pd.DataFrame(rows)


def _nd_or_zero3(g: pd.DataFrame):
    """The paper's baseline, ND parallelism (`nd`), where the group has it; zero3 over all ranks otherwise."""
    return g["scheduler"] == ("nd" if (g["scheduler"] == "nd").any() else "zero3")


def table2(res: Results) -> list:
    pc = per_config(res)
    t = _versus(pc, _nd_or_zero3, ["pp"], [])
    return [Table(t, "Speed-up against the paper's baseline, ND parallelism (nd: tensor parallelism over a node, "
                     "sequence parallelism, distributed optimizer), as the paper's 100%, among the layouts with the "
                     "same pipeline stages (the 9B rows without, the 36B rows' shape with two); against zero3 over "
                     "all ranks when the sweep has no nd run.")]


def table3(res: Results) -> list:
    pc = per_config(res)
    pc = pc[pc["scheduler"] == "asynchzp"]
    t = _versus(pc, lambda g: ~g["async"], ["z1", "z2", "z3", "cp", "pp", "pp_reuse", "seq_len"], [])
    return [Table(t, "Speed-up of each asynchzp layout against the same layout inline (scheduler.async = false, "
                     "the paper's vanilla scheduling); with pipeline stages, with and without reusing a gather "
                     "across neighbouring actions (scheduler.pp_reuse).")]


def table4(res: Results) -> list:
    pc = per_config(res)
    pc = pc.sort_values(["seq_len", "global_batch"], kind="stable")
    t = _versus(pc, _nd_or_zero3, ["seq_len", "global_batch"],
                ["seq_len", "global_batch", "comm_to_compute"], name="layout")
    return [Table(t, "Per sequence length and global batch (comm_to_compute r: the links' ratio at that length), "
                     "speed-up against ND parallelism (nd) at the same length and batch where it ran (the "
                     "shortest with tensor parallelism, the middle one with tensor × pipeline parallelism, the "
                     "longest with tensor × context × pipeline parallelism), else against zero3. zero3, hsdp and "
                     "asynchzp run every length without context parallelism or stages; asynchzp also with two "
                     "stages at the middle length and with context parallelism (alone and with two stages) at the "
                     "longest, as the paper's AsyncHZP rows.")]


def ablation(res: Results) -> list:
    pc = per_config(res)
    a = pc[pc["scheduler"] == "asynchzp"].sort_values(["async", "z1", "z2", "z3"], ascending=[False, True, True, True])
    if a.empty:
        return [Text("No asynchzp runs in this sweep.")]
    base = a[(a["z1"] == a["world"]) & (a["z2"] == a["world"]) & (a["z3"] == a["world"]) & ~a["async"]]
    b = float(base["tokens_per_s_median"].iloc[0]) if len(base) else math.nan
    rows = [{"z1": r["z1"], "z2": r["z2"], "z3": r["z3"], "async": "on" if r["async"] else "off",
             "ended": _ended(r), "step time": fmt.seconds(r["step_time_s_median"]),
             "exposed comm": fmt.pct(r["exposed_comm_frac_median"]), "MFU": fmt.pct(r["mfu_median"], 2),
             "peak memory/rank": fmt.nbytes(r["mem_peak_bytes_max"]),
             "model state/rank": fmt.nbytes(r["model_state_bytes"]),
             "speedup vs zero3 layout": _speedup(r["tokens_per_s_median"], b)} for _, r in a.iterrows()]
    ok = a[a["ok"] > 0]
    best = []
    for col, what, pick in (("tokens_per_s_median", "fastest", "idxmax"), ("mem_peak_bytes_max", "least peak memory",
                                                                          "idxmin"),
                            ("exposed_comm_frac_median", "least exposed communication", "idxmin")):
        if ok[col].notna().any():
            r = ok.loc[getattr(ok[col], pick)()]
            best.append(f"{what}: z1={r['z1']} z2={r['z2']} z3={r['z3']} async {'on' if r['async'] else 'off'}")
    runs_per = int(a["runs"].max())
    steps = res.runs["completed_steps"].max() - (res.runs["warmup_steps"].max() if "warmup_steps" in res.runs else 0)
    caution = (f" One run per layout and {steps:g} measured steps each: the step times carry the machine's noise "
               "(no spread across repeats to judge it by); read differences of a few tens of percent as "
               "inconclusive, memory and bytes as exact." if runs_per == 1 else "")
    return [Table(pd.DataFrame(rows), "Every asynchzp layout of the sweep; speed-up against z1 = z2 = z3 = W "
                                      "inline (the zero3 layout), tokens/s of medians over ok runs." + caution),
            Bullets(best)]


def blocks(part: str, res: Results, folder: Path, available: set[str]) -> list:
    out = [Heading(TITLES[part])]
    if part == "table1":
        out += table1(res, folder)
    elif part == "table2":
        out += table2(res)
    elif part == "table3":
        out += table3(res)
    elif part == "table4":
        out += table4(res)
    elif part == "ablation":
        out += ablation(res)
    out += _published(part)
    out += _pending(part, available)
    return out
