"""Per-layer decisions a quantize run must honour, from a file: what ``edgekit debug --fix`` writes
into a bundle and ``edgekit quantize --overrides FILE`` reads, so a fix survives a re-quantize.

    {"schema": "edgekit.quantize-overrides/1",
     "overrides": [
       {"node": "blocks.2.mlp.fc", "action": "float", "reason": "...", "source": "edgekit debug ..."},
       {"node": "node_linear_3", "action": "weight-only"},
       {"tensor": "/blocks.1/attn/Softmax_output_0", "action": "int16"}
     ]}

``node``: a node name of the FP32 graph or of the prepared one quantize works on, an op type or a
torch module path (as ``--exclude`` takes them: ``cpu/select.match_exclude``); ``action`` float
(FP32 weights and compute), weight-only (INT8 weights, float compute; cpu/trt profiles) or int16
(qnn: the activation or MatMul weight tensor promoted to 16 bit from the start).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.userfiles import read_user_text

SCHEMA = "edgekit.quantize-overrides/1"
NODE_ACTIONS: tuple[str, ...] = ("float", "weight-only")
TENSOR_ACTIONS: tuple[str, ...] = ("int16",)
_KEYS = {"node", "tensor", "action", "reason", "source", "step", "metric"}


def load_overrides(path: str | Path) -> tuple[dict[str, Any], ...]:
    """The overrides of ``path`` (JSON, the schema above), each checked; one error line otherwise."""
    p = Path(path)
    text = read_user_text(p, "--overrides")  # a regular file of bounded size: never a FIFO or /dev/zero
    try:
        doc = json.loads(text)
    except (RecursionError, json.JSONDecodeError) as exc:
        raise UsageError(f"--overrides {p} is not a readable JSON file ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA or not isinstance(doc.get("overrides"), list):
        raise UsageError(f'--overrides {p}: expected a JSON object with "schema": "{SCHEMA}" and an "overrides" list')
    return check_overrides(doc["overrides"], str(p))


def check_overrides(items: Sequence[Any], where: str = "--overrides") -> tuple[dict[str, Any], ...]:
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise UsageError(f"{where}: override #{i + 1} must be an object, found {type(item).__name__}")
        unknown = sorted(set(item) - _KEYS)
        if unknown:
            raise UsageError(
                f"{where}: override #{i + 1} has unknown key {unknown[0]!r}; valid: {', '.join(sorted(_KEYS))}"
            )
        action = item.get("action")
        if "node" in item and action in NODE_ACTIONS and isinstance(item["node"], str) and item["node"]:
            out.append(dict(item))
        elif "tensor" in item and action in TENSOR_ACTIONS and isinstance(item["tensor"], str) and item["tensor"]:
            out.append(dict(item))
        else:
            raise UsageError(
                f'{where}: override #{i + 1} {dict(item)!r} is invalid; valid: {{"node": NAME, "action": '
                f'{" | ".join(NODE_ACTIONS)}}} or {{"tensor": NAME, "action": {" | ".join(TENSOR_ACTIONS)}}}'
            )
    return tuple(out)


def overrides_document(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The file form of ``items`` (what debug --fix writes and --overrides reads)."""
    return {"schema": SCHEMA, "overrides": [dict(i) for i in items]}


def node_overrides(items: Sequence[Mapping[str, Any]], action: str) -> list[Mapping[str, Any]]:
    return [i for i in items if i.get("node") and i.get("action") == action]


def tensor_overrides(items: Sequence[Mapping[str, Any]], action: str = "int16") -> list[str]:
    return [str(i["tensor"]) for i in items if i.get("tensor") and i.get("action") == action]
