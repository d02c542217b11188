"""Which nodes the cpu and trt profiles quantize (``select_nodes``): the config's op types, less
``--exclude``, node overrides and what the profile keeps float by rule (the attention core, but
QKᵀ with ``QuantizeConfig.attention_scores`` "int8", the flow time embedding, GEMV-shaped
layers on TensorRT); which float nodes still store INT8 weights (``weight_only_by_rule``); and
which embedding tables are stored int8 (``select_tables``)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping

from edgekit.errors import UsageError
from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.cpu import tables as table_rules
from edgekit.quantize.graph import GraphPlan


def match_exclude(plan: GraphPlan, pattern: str) -> list[str]:
    """Node names a ``--exclude`` value or an override names: a node name of the prepared graph or
    of the FP32 graph it came from (``NodeInfo.origin``), an op type, or a torch module path
    (``blocks.0`` matches ``blocks.0.attn.qkv``: a module covers every node under it)."""
    return [
        n.name
        for n in plan.nodes
        if pattern in (n.name, n.op_type, n.label)
        or pattern in n.origin
        or n.label.startswith(pattern + ".")
        or n.name.split("/")[0] == pattern
    ]


def unmatched(plan: GraphPlan, what: str, pattern: str, op_types: tuple[str, ...], hint: str) -> UsageError:
    """The one line for a name that matches no node: the closest name a user could have meant
    (any kind: prepared node, FP32 node, torch module or one above it), and what is valid."""
    known = {n.op_type for n in plan.nodes}
    for n in plan.candidates(op_types):
        known.update(n.names)
        parts = (n.module or "").split(".")
        known.update(".".join(parts[:i]) for i in range(1, len(parts)))
    close = difflib.get_close_matches(pattern, sorted(known), n=1, cutoff=0.6)
    examples = ", ".join(sorted({n.label for n in plan.candidates(op_types)})[:4])
    return UsageError(
        f"{what} matches no node of this graph"
        + (f" (did you mean {close[0]!r}?)" if close else "")
        + f"; valid: a node name of the FP32 or prepared graph, an op type or a torch module path (e.g. {examples})",
        hint=hint,
    )


def user_floated(plan: GraphPlan, cfg: QuantizeConfig, actions: tuple[str, ...] | None = None) -> dict[str, str]:
    """{node: why} of what the user keeps out of INT8: ``--exclude`` patterns and node overrides
    (with ``actions``, only overrides of those actions), each matched as a node name, op type or
    module path (``match_exclude``); one that matches nothing is one line naming it."""
    floated: dict[str, str] = {}
    for pattern in cfg.exclude:
        hits = match_exclude(plan, pattern)
        if not hits:
            raise unmatched(
                plan,
                f"--exclude {pattern!r}",
                pattern,
                cfg.op_types,
                "`edgekit quantize BUNDLE --json` lists every node it quantized or kept float under selection",
            )
        for name in hits:
            floated.setdefault(name, f"excluded by --exclude {pattern}")
    for o in cfg.overrides:
        if not o.get("node") or (actions is not None and o.get("action") not in actions):
            continue
        hits = match_exclude(plan, o["node"])
        if not hits:
            raise unmatched(
                plan,
                f"override {{'node': {o['node']!r}, 'action': {o.get('action')!r}}}",
                o["node"],
                cfg.op_types,
                "fix the name in the --overrides file, or re-run `edgekit debug BUNDLE --fix` on this bundle",
            )
        why = f"override {o['action']}" + (f" ({o['reason']})" if o.get("reason") else "")
        for name in hits:
            floated.setdefault(name, why)
    return floated


def select_nodes(plan: GraphPlan, cfg: QuantizeConfig) -> tuple[list[str], dict[str, str]]:
    """(nodes to quantize, {node kept float: why}) for the config's op types, profile and excludes."""
    floated = user_floated(plan, cfg)
    settings = cfg.settings
    candidates = plan.candidates(cfg.op_types)
    # A module path also names its LayerNorms and Adds: only nodes that could be INT8 are listed.
    floated = {n.name: floated[n.name] for n in candidates if n.name in floated}
    chosen = []
    for node in candidates:
        if node.name in floated:
            continue
        if node.role == "attention-core" and cfg.float_attention_core:
            if node.attention_scores and cfg.attention_scores == "int8":
                chosen.append(node.name)  # symmetric int8 Q and K (ptq.quantize_model): OpenVINO's int8 attention
            else:
                floated[node.name] = "attention core (QKᵀ/AV: both inputs are activations)"
        elif node.role == "time-embedding" and cfg.float_time_embedding:
            floated[node.name] = "flow time embedding (sinusoid of 1000·t and the time MLP)"
        elif settings.skip_gemv and node.op_type in ("MatMul", "Gemm") and node.rows == 1:
            floated[node.name] = "GEMV-shaped (1 row): TensorRT runs it as fast unquantized"
        else:
            chosen.append(node.name)
    return chosen, floated


def weight_only_by_rule(floated: Mapping[str, str], cfg: QuantizeConfig) -> list[str]:
    """The float-kept nodes (``select_nodes``' second result) that store INT8 weights: those kept
    float by rule where the profile allows it, and weight-only overrides; ``--exclude`` and float
    overrides mean fully float."""

    def weight_only(why: str) -> bool:
        if why.startswith("override "):
            return why.startswith("override weight-only")
        return cfg.settings.weight_only_float and not why.startswith("excluded")

    return [n for n, why in floated.items() if weight_only(why)]


def select_tables(plan: GraphPlan, cfg: QuantizeConfig) -> tuple[list[str], dict[str, str]]:
    """(Gathers whose embedding table is stored int8, {table Gather kept float: why}): every
    ``NodeInfo.table`` where the profile stores int8 tables, less ``--exclude`` and float overrides
    (``user_floated``: node name, op type, module path) and tables under ``tables.MIN_TABLE_BYTES``."""
    tables = [n for n in plan.nodes if n.table]
    if not cfg.settings.int8_gather_tables:
        return [], {n.name: f"the {cfg.profile} profile keeps embedding tables float" for n in tables}
    floated = user_floated(plan, cfg, actions=("float",))
    chosen, kept = [], {}
    for n in tables:
        size = 4 * math.prod(n.table)
        if n.name in floated:
            kept[n.name] = floated[n.name]
        elif size < table_rules.MIN_TABLE_BYTES:
            kept[n.name] = (
                f"{size} B table, under {table_rules.MIN_TABLE_BYTES} B: int8 saves little for 3 more kernels a call"
            )
        else:
            chosen.append(n.name)
    return chosen, kept
