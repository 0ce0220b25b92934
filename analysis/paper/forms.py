"""Closed forms of model-state bytes per rank and component (AsyncHZP, arXiv 2510.20111, §4.1.1 and Table 1):
each component's bytes per parameter over the size of the group it is sharded over, without padding.

bf16-mixed: parameters 2N (bf16), gradients 4N, master 4N, m 4N, v 4N (fp32): 18N per replica, and
asynchzp's 12N/z1 + 4N/z2 + 2N/z3. fp32 has no master (the parameters are it): 16N. Deterministic mode sums
gradients as int64 fixed point: 8 bytes per gradient element (docs/deterministic.md). A run may exceed the
form by its padding (each segment padded to a multiple of its group), never fall below it.
"""
from __future__ import annotations

from ..load import labels

COMPONENTS = ("param", "grad", "master", "m", "v")

ELEMENT_BYTES = {
    "bf16-mixed": {"param": 2, "grad": 4, "master": 4, "m": 4, "v": 4},
    "fp32": {"param": 4, "grad": 4, "master": 0, "m": 4, "v": 4},
    "fp64": {"param": 8, "grad": 8, "master": 0, "m": 8, "v": 8},
}


def divisors(cfg: dict, world: int) -> dict[str, int] | None:
    """Per component, how many ranks share it; None for a scheduler with no closed form here."""
    name = str(cfg.get("scheduler.name"))
    opt = ("master", "m", "v")
    if name in ("none", "ddp"):
        return {c: 1 for c in COMPONENTS}
    if name == "zero1":
        return {"param": 1, "grad": 1, **{c: world for c in opt}}
    if name == "zero2":
        return {"param": 1, "grad": world, **{c: world for c in opt}}
    if name == "zero3":
        return {c: world for c in COMPONENTS}
    if name == "hsdp":
        z = labels.hsdp_group(cfg, world)
        return {c: z for c in COMPONENTS}
    if name == "asynchzp":
        # Each of pp stages holds its share of the model (the form splits it evenly), sharded by its own z-groups.
        z1, z2, z3 = labels.groups(cfg, world)
        pp = int(cfg.get("scheduler.pp", 1) or 1)
        return {"param": z3 * pp, "grad": z2 * pp, **{c: z1 * pp for c in opt}}
    if name == "nd":
        # The model split evenly over tp × pp (the form ignores that the ends sit on the first and last stage and
        # that the norm gains are whole on every tensor-parallel rank: both show in plan − form), the optimizer
        # state further over dp under the distributed optimizer.
        mp = int(cfg.get("scheduler.tp", 1)) * int(cfg.get("scheduler.pp", 1))
        dist = labels.truthy(cfg.get("scheduler.distributed_optimizer", False))
        return {"param": mp, "grad": mp, **{c: (world if dist else mp) for c in opt}}
    return None


def model_state(cfg: dict, world: int, n_params: int) -> dict[str, float] | None:
    """Bytes per rank per component by the closed form, or None (unknown scheduler or precision)."""
    div = divisors(cfg, world)
    per = ELEMENT_BYTES.get(str(cfg.get("train.precision", "fp32")))
    if div is None or per is None:
        return None
    per = dict(per)
    if labels.truthy(cfg.get("train.deterministic", False)):
        per["grad"] = 8
    return {c: per[c] * n_params / div[c] for c in COMPONENTS}


def formula(cfg: dict, world: int) -> str:
    """The form as the paper writes it, optimizer states + gradients + parameters, with the group sizes
    filled in: '12N/64 + 4N/8 + 2N/8' (asynchzp at Z1 = 64, Z2 = Z3 = 8, bf16-mixed)."""
    div = divisors(cfg, world)
    per = ELEMENT_BYTES.get(str(cfg.get("train.precision", "fp32")))
    if div is None or per is None:
        return "no closed form"
    terms = [(per["master"] + per["m"] + per["v"], div["m"]), (per["grad"], div["grad"]), (per["param"], div["param"])]
    return " + ".join(f"{b}N" + (f"/{d}" if d != 1 else "") for b, d in terms if b)
