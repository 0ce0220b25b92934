"""`hzpbench plan --json`: one JSON object that parses, holds the same numbers as the tables, and states the
schedulers that cannot be planned. The 9B asynchzp layout's model-state total is the paper's closed form
12N/64 + 4N/8 + 2N/8 with N = 9,359,921,152 (8,774,926,080 bytes per rank; AsyncHZP §4.1.1 / Table 1), and
zero3's parameter bytes are the per-unit padded shard of N in bf16 or fp32 (checked against the table's). nd at the
paper's TP = 8 layouts (9b and seed-oss-36b on 256 ranks, sequence parallelism, distributed optimizer): its
model-state bytes and its tensor-parallel collectives per step against closed forms of the rank's pieces; and at the
36B ND layout TP = 8 × PP = 4: the first and last stage's bytes, pipeline messages and activations in flight. The
activation estimate at the paper's 9B layouts (AsyncHZP with CP = 8, ND TP = 8) and the 36B ND layout against closed
forms of what the forward keeps, with and without recompute."""
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


# nd, TP = 8 inside each node of 8, dp = 32 with the distributed optimizer, sequence parallelism.
SHAPES = {  # layers, d, heads, kv_heads, head_dim, ffn, vocab, seq_len, tied
    "9b": (40, 4096, 32, 8, 128, 14336, 155136, 32768, True),
    "seed-oss-36b": (64, 5120, 80, 8, 128, 27648, 155136, 32768, False),
}
for preset, (L, d, H, KV, hd, F, V, T, tied) in SHAPES.items():
    tp, dp = 8, 32
    out = subprocess.run([HZP, "plan", "--json", "--set", f"model.preset={preset}", "--set", "topology.world_size=256",
                          "--set", "topology.ranks_per_node=8", "--scheduler", "nd", "--set", "scheduler.tp=8",
                          "--set", "scheduler.sequence_parallel=true", "--set", "scheduler.distributed_optimizer=true"],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, f"nd {preset}: plan failed: {out.stderr}")
    if out.returncode != 0:
        continue
    nd = json.loads(out.stdout)["plans"][0]
    # The rank's pieces per unit: the embedding's V/tp rows; per block the norm gains whole and q, k, v, o, gate,
    # up, down split by tp; the head's final norm (and an untied LM head's V/tp rows).
    units = [V * d // tp] + [2 * d + (2 * H * hd * d + 2 * KV * hd * d + 3 * F * d) // tp] * L + [d + (0 if tied else V * d // tp)]
    padded = sum(-(-u // dp) * dp for u in units)  # each unit padded to a multiple of dp
    slice_ = padded // dp
    want = {"param": 2 * padded, "grad": 4 * padded, "master": 4 * slice_, "m": 4 * slice_, "v": 4 * slice_}
    got = {k: nd["state_bytes"][k] for k in want}
    check(got == want, f"nd {preset} state bytes {got}, expected {want}")
    # Sequence parallelism per micro-batch of N = T tokens: 4L + 2 all-gathers of N/tp·d rows and 4L + 2
    # reduce-scatters of N·d over the tp group; m = global_batch / dp = 512 / 32 micro-batches per rank.
    m = 512 // dp
    tp_rows = [c for c in nd["collectives"] if c["group"] == "tp"]
    ag = sum(c["elements"] for c in tp_rows if c["op"] == "all_gather")
    rs = sum(c["elements"] for c in tp_rows if c["op"] == "reduce_scatter")
    check(ag == m * (4 * L + 2) * (T // tp) * d, f"nd {preset}: tp all_gather elements {ag}")
    check(rs == m * (4 * L + 2) * T * d, f"nd {preset}: tp reduce_scatter elements {rs}")
    check(all(c["bytes"]["inter"] == 0 for c in tp_rows), f"nd {preset}: the tp group stays inside a node")
    check(nd["micro_batches_per_rank"] == m, f"nd {preset}: {nd['micro_batches_per_rank']} micro-batches per rank")

# nd at the paper's 36B ND layout: TP = 8 inside a node, PP = 4 stages of 16 blocks (the outermost axis: stage s is
# ranks 64s..64s+63), dp = 8 with the distributed optimizer, 1F1B. Rank 0 holds the embedding and blocks 0-15,
# rank 255 blocks 48-63 and the head; each sends its boundary activation (T/tp rows of d, bf16, to the next stage's
# node) once per micro-batch forward and its input gradient once per micro-batch backward.
L, d, H, KV, hd, F, V, T, tied = SHAPES["seed-oss-36b"]
tp, pp, dp = 8, 4, 8
m = 512 // dp
block = 2 * d + (2 * H * hd * d + 2 * KV * hd * d + 3 * F * d) // tp
for rank, units, sends, in_flight in ((0, [V * d // tp] + [block] * 16, ["activation out"], 4),
                                      (255, [block] * 16 + [d + V * d // tp], ["gradient out"], 1)):
    out = subprocess.run([HZP, "plan", "--json", "--rank", str(rank), "--set", "model.preset=seed-oss-36b", "--set",
                          "topology.world_size=256", "--set", "topology.ranks_per_node=8", "--scheduler", "nd",
                          "--set", "scheduler.tp=8", "--set", "scheduler.pp=4", "--set", "scheduler.sequence_parallel=true",
                          "--set", "scheduler.distributed_optimizer=true"], capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, f"nd tp8 pp4 rank {rank}: plan failed: {out.stderr}")
    if out.returncode != 0:
        continue
    nd = json.loads(out.stdout)["plans"][0]
    padded = sum(-(-u // dp) * dp for u in units)
    slice_ = padded // dp
    want = {"param": 2 * padded, "grad": 4 * padded, "master": 4 * slice_, "m": 4 * slice_, "v": 4 * slice_}
    got = {k: nd["state_bytes"][k] for k in want}
    check(got == want, f"nd tp8 pp4 rank {rank} state bytes {got}, expected {want}")
    p2p = [c for c in nd["collectives"] if c["group"] == "pp" and c["op"] in ("send", "recv")]
    check(len(p2p) == 2 and all(c["calls"] == m and c["elements"] == m * (T // tp) * d for c in p2p),
          f"nd tp8 pp4 rank {rank}: pipeline messages {p2p}")
    sent = [c for c in p2p if c["op"] == "send"]
    check([c["when"].split("(")[1].rstrip(")") for c in sent] == sends and
          sent[0]["bytes"] == {"intra": 0, "inter": m * (T // tp) * d * 2}, f"nd tp8 pp4 rank {rank}: sends {sent}")
    check(nd["activations_in_flight"] == in_flight, f"nd tp8 pp4 rank {rank}: {nd['activations_in_flight']} in flight")


# Activations, estimated (ModelSpec::activation_bytes over the rank's schedule), against closed forms of what the
# forward must keep, in bf16 with fp32 statistics. Per block on T' tokens of width d: h1, x2, h2 and the output
# [T', d]; q and the attention output [T', H·hd]; k, v [T', KV·hd]; gate, up and SwiGLU [T', F]; two RMSNorm rstd
# [T'] and the attention's log-sum-exp [H, T']. Under full recompute a unit keeps only its output (the residual
# stream), and a vocabulary-parallel head its softmax statistics [3, T'].
def plan_json(*args):
    out = subprocess.run([HZP, "plan", "--json", "--set", "topology.world_size=256", "--set",
                          "topology.ranks_per_node=8", *args], capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, f"plan {args}: {out.stderr}")
    return json.loads(out.stdout)["plans"][0] if out.returncode == 0 else None


L, d, H, KV, hd, F, V, T, tied = SHAPES["9b"]
t = T // 8  # cp = 8: each rank holds an eighth of every sequence
block = 2 * t * (4 * d + 2 * H * hd + 2 * KV * hd + 3 * F) + 4 * (2 * t + H * t)
hzp9 = ["--set", "model.preset=9b", "--scheduler", "asynchzp", "--set", "scheduler.z1=64", "--set", "scheduler.z2=8",
        "--set", "scheduler.z3=8", "--set", "scheduler.cp=8"]
a = plan_json(*hzp9)
if a:
    want = 2 * t * d + L * block + (4 * t + 2 * t * d + 2 * t * V)  # embedding, blocks, head (norm, rstd, logits)
    check(a["activation_bytes"]["per_micro_batch"] == want, f"asynchzp 9b cp8: activations {a['activation_bytes']}, "
          f"expected {want} per micro-batch")
    check(a["activation_bytes"]["peak"] >= want and a["activation_bytes"]["waiting_at_most"] == 0,
          f"asynchzp 9b cp8: {a['activation_bytes']}")
a = plan_json(*hzp9, "--set", "train.recompute=true")
if a:
    check(a["activation_bytes"]["per_micro_batch"] == (L + 1) * t * d * 2,
          f"asynchzp 9b cp8 recompute: {a['activation_bytes']}, expected {(L + 1) * t * d * 2}")
nd9 = ["--set", "model.preset=9b", "--scheduler", "nd", "--set", "scheduler.tp=8", "--set",
       "scheduler.sequence_parallel=true", "--set", "scheduler.distributed_optimizer=true", "--set", "train.recompute=true"]
a = plan_json(*nd9)
if a:  # sequence parallelism: the residual stream on T/tp rows; the vocabulary-parallel head's statistics on all T
    want = (L + 1) * (T // 8) * d * 2 + 3 * T * 4
    check(a["activation_bytes"]["per_micro_batch"] == want, f"nd 9b tp8 recompute: {a['activation_bytes']}, "
          f"expected {want}")
# 36B, TP = 8 × PP = 4, 1F1B, recompute: rank 0 (embedding and 16 blocks, 4 micro-batches in flight, nothing
# received) and rank 255 (its received input, 16 blocks and the head's statistics; each of its 64 backwards' input
# gradients may wait for the previous stage).
L, d, H, KV, hd, F, V, T, tied = SHAPES["seed-oss-36b"]
rows = T // 8 * d * 2
nd36 = ["--set", "model.preset=seed-oss-36b", "--scheduler", "nd", "--set", "scheduler.tp=8", "--set", "scheduler.pp=4",
        "--set", "scheduler.sequence_parallel=true", "--set", "scheduler.distributed_optimizer=true", "--set",
        "train.recompute=true"]
for rank, want, waiting in ((0, 17 * rows, 0), (255, 17 * rows + 3 * T * 4, 64 * rows)):
    a = plan_json(*nd36, "--rank", str(rank))
    if a:
        got = a["activation_bytes"]
        check(got["per_micro_batch"] == want and got["waiting_at_most"] == waiting and
              got["peak"] >= a["activations_in_flight"] * want,
              f"nd 36b tp8 pp4 recompute rank {rank}: {got}, expected {want} per micro-batch, {waiting} waiting")
if failed:
    sys.exit("\n".join(failed))
print(f"plan --json: {len(plans)} plans, {len(refused)} refused, tables agree; nd TP = 8 (and TP = 8 × PP = 4) plans "
      "match the closed forms")
