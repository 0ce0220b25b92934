"""`hzpbench plan --json`: one JSON object that parses, holds the same numbers as the tables, and states the
schedulers that cannot be planned. The 9B asynchzp layout's model-state total is the paper's closed form
12N/64 + 4N/8 + 2N/8 with N = 9,359,921,152 (8,774,926,080 bytes per rank; AsyncHZP §4.1.1 / Table 1), and
zero3's parameter bytes are the per-unit padded shard of N in bf16 or fp32 (checked against the table's)."""
import json
import re
import subprocess
import sys

HZP = sys.argv[1]
COMMON = ["--set", "model.preset=9b", "--set", "topology.world_size=256", "--set", "topology.ranks_per_node=8",
          "--set", "scheduler.z1=64", "--set", "scheduler.z2=8", "--set", "scheduler.z3=8", "--set", "scheduler.group_size=3"]


def run(*extra):
    p = subprocess.run([HZP, "plan", *COMMON, *extra], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        sys.exit(f"hzpbench plan failed ({p.returncode}):\n{p.stderr}")
    return p.stdout


doc = json.loads(run("--json"))
plans = {p["scheduler"]: p for p in doc["plans"]}
failed = []


def check(ok, msg):
    if not ok:
        failed.append(msg)


check(doc["precision"] == "bf16-mixed" and doc["ranks_per_node"] == 8, f"header {doc['precision']}, {doc['ranks_per_node']}")
check(plans["asynchzp"]["state_bytes"]["total"] == 8774926080, f"asynchzp total {plans['asynchzp']['state_bytes']}")
check(plans["asynchzp"]["params"] == 9359921152, f"N = {plans['asynchzp']['params']}")
refused = {r["scheduler"]: r["error"] for r in doc["not_plannable"]}
check("hsdp" in refused and "scheduler.group_size = 3" in refused["hsdp"], f"not_plannable {refused}")
check("none" in refused, "none is refused at W = 256")
# The same numbers as the tables: every state component and every collective row of every plan.
text = run()
for name, p in plans.items():
    block = text.split(f"scheduler {name}, W = 256")[1].split("\nscheduler ")[0]
    for comp in ("param", "grad", "master", "m", "v", "total"):
        m = re.search(rf"^\s+{comp}\s+(\d+)\s", block, re.M)
        check(m is not None and int(m[1]) == p["state_bytes"][comp], f"{name} {comp}: table {m and m[1]}")
    rows = re.findall(r"^\s+(all_gather|reduce_scatter|all_reduce)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(.+)$",
                      block, re.M)
    check(len(rows) == len(p["collectives"]), f"{name}: {len(rows)} table rows, {len(p['collectives'])} in JSON")
    for row, c in zip(rows, p["collectives"]):
        got = (c["op"], c["group"], str(c["group_size"]), c["dtype"], str(c["calls"]), str(c["elements"]),
               str(c["bytes"]["intra"]), str(c["bytes"]["inter"]), c["when"])
        check(tuple(row) == got, f"{name}: table {row} vs JSON {got}")
if failed:
    sys.exit("\n".join(failed))
print(f"plan --json: {len(plans)} plans, {len(refused)} refused, tables agree")
