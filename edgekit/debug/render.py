"""`edgekit debug`'s console output: the one summary line, where the error entered and why, the
worst steps × modules, and what --fix tried."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from edgekit.output import Output


def db(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return "inf" if value == math.inf else f"{value:.1f} dB"


def verdict(gate: Mapping[str, Any]) -> str:
    margin = gate.get("margin")
    shown = (
        "inf" if margin in (math.inf, "inf") else f"{margin:+.2f}" if isinstance(margin, (int, float)) else str(margin)
    )
    return f"check {'passes' if gate['passed'] else 'fails'}, margin {shown}"


def summary_line(doc: Mapping[str, Any]) -> str:
    """ "step 3 of 8, blocks.2.mlp.fc (MatMul): 18.2 dB; fixed by …: check passes, margin +0.04"."""
    entry = doc.get("entry")
    if entry is None:
        head = "no tensor of the two variants could be compared"
    else:
        head = (
            f"step {entry['step']} of {entry['steps']}, {entry['module']} ({entry['op']}): {db(entry['added_sqnr_db'])}"
        )
        if not entry["crossed_threshold"]:
            head += f" (no op below {db(doc['settings']['threshold_db'])}: the most added)"
        cause = (doc.get("attribution") or {}).get("cause")
        if cause:
            head += f", {cause}"
    fixed = doc.get("fix")
    if fixed and fixed.get("winner"):
        return f"{head}; fixed by {fixed['winner']['what']}: {verdict(fixed['winner']['after'])}"
    tail = verdict(doc["gate"])
    if fixed is not None:
        tail += f"; not fixed: {fixed.get('why', '')}"
    elif not doc["gate"]["passed"]:
        tail += " (`--fix` tries the smallest change)"
    return f"{head}; {tail}"


def print_debug(o: Output, doc: Mapping[str, Any]) -> None:
    entry, attribution = doc.get("entry"), doc.get("attribution") or {}
    o.pairs(
        f"{doc['model']}: {doc['candidate']} vs {doc['reference']}",
        {
            "replayed": f"{doc['calls']} network calls over {doc['steps']} "
            f"steps ({doc['settings']['replay_rows']} row(s)), "
            f"{doc['capture']['tensors']} tensors",
            "captured (candidate)": doc["capture"]["candidate"],
            "error enters": "—"
            if entry is None
            else f"step {entry['step']}, {entry['module']} ({entry['op']} {entry['node']})",
            "SQNR there": "—"
            if entry is None
            else f"{db(entry['sqnr_db'])} out, {db(entry['input_sqnr_db'])} in, {db(entry['added_sqnr_db'])} added",
            "cause": f"{attribution.get('cause', '—')}: {attribution.get('why', '')}",
            "compounds": "—"
            if not doc.get("compounding")
            else f"{doc['compounding']['summary']} ({doc['compounding']['why']})",
        },
    )
    _worst(o, doc)
    _fixes(o, doc.get("fix"))
    for w in doc.get("warnings", []):
        o.warn(w)
    o.line(summary_line(doc))


def _worst(o: Output, doc: Mapping[str, Any]) -> None:
    labels, grid = doc["layers"]["labels"], doc["layers"]["per_step"]
    if not labels:
        return
    cells = [
        (v, s, i) for s, row in enumerate(grid) for i, v in enumerate(row) if isinstance(v, float) and not math.isnan(v)
    ]
    rows = [(f"step {s + 1}", labels[i], db(v)) for v, s, i in sorted(cells)[:8]]
    o.table("lowest SQNR (step × module output, teacher-forced)", ["step", "module", "SQNR"], rows)


def _fixes(o: Output, fixed: Mapping[str, Any] | None) -> None:
    if not fixed:
        return
    rows = [
        (t["what"], "pass" if t["passed"] else "fail", t.get("margin", "—") if "error" not in t else t["error"][:80])
        for t in fixed.get("tried", [])
    ]
    rows += [(u["kind"], "not available", u["why"]) for u in fixed.get("unavailable", [])]
    o.table("fixes tried (each: re-quantized scratch copy, check's gate)", ["fix", "gate", "margin"], rows)
    if fixed.get("winner"):
        o.line(f"wrote {fixed['winner']['artifact']} (re-quantize with `edgekit quantize BUNDLE --overrides` it)")
