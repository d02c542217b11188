"""`edgekit check`'s console output: the metric table, quality vs ground truth, per-step curves and
the verdict line; and the demo's one-row-per-model summary."""

from __future__ import annotations

import math

from edgekit.output import Output


def check_num(value, spec: str = ".4g") -> str:
    """A number for the table; also takes the strings a JSON round trip leaves ("inf", from
    `edgekit deploy --command check`) and None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"  # not defined (edgekit.output.NOT_DEFINED)
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def threshold_cell(row: dict) -> str:
    if row["threshold"] is None:
        return "—"
    return f"{'≥' if row['bound'] == 'min' else '≤'} {check_num(row['threshold'])}"


def baseline_cell(row: dict) -> str:
    if row["baseline"] is None:
        return "—"
    allowed = row["allowed_regression"]
    return check_num(row["baseline"]) + (f" (±{check_num(allowed, '.2g')})" if allowed is not None else "")


def result_cell(row: dict) -> str:
    if not row["passed"]:
        return "FAIL"
    if row["value"] is None:
        return "n/a"  # undefined on both variants (e.g. NLL when no sequence is valid)
    return "pass" if row["gated"] else "info"


def print_check(o: Output, doc: dict) -> None:
    mode = "greedy" if doc["greedy"] else "sampling as the bundle, same noise"
    rows = [(r["metric"], r["value"], threshold_cell(r), baseline_cell(r), result_cell(r)) for r in doc["rows"]]
    o.table(
        (
            f"{doc['model']} ({doc['kind']}): {doc['candidate']} vs "
            f"{doc['reference']} — n={doc['n']}, seed={doc['seed']}, {mode}"
        ),
        ["metric", "value", "threshold", "baseline", "result"],
        rows,
    )
    if doc.get("conditions"):
        o.info(f"conditions: {doc['conditions']}")
    q = doc["quality"]
    if q["reference"]:
        o.table(
            "quality vs ground truth" if q["ground_truth"] else f"quality ({q['metric_hook']})",
            ["metric", doc["reference"], doc["candidate"], "drop"],
            [(k, v, q["candidate"].get(k), q["drop"].get(k)) for k, v in q["reference"].items()],
        )
    for name, curve in doc["curves"].items():
        if 0 < len(curve) <= 16:  # per-step curves: where along the decode the candidate drifts
            o.line(f"{name}: " + "  ".join(check_num(v, ".3g") for v in curve))
    gated = sum(1 for r in doc["rows"] if r["gated"])
    if doc["passed"]:
        o.line(
            f"PASS: {gated} gated metrics within their thresholds"
            + (f" and baseline {doc['baseline']}" if doc["baseline"] else "")
        )
    for key, what in (("saved_baseline", "baseline"), ("junit", "JUnit XML")):
        if doc.get(key):
            o.line(f"wrote {what} {doc[key]}")


def print_demo_check(o: Output, chk: dict) -> None:
    """The demo's last table: one verdict per model."""
    rows = []
    for model, m in chk["models"].items():
        key = {
            "masked": ("token_agreement", "logits_kl"),
            "flow": ("snr_db", "velocity_snr_db"),
            "ar": ("token_agreement", "logits_kl"),
        }
        doc = chk["documents"][model]
        shown = ", ".join(f"{k} {check_num(m['metrics'][k])}" for k in key[doc["kind"]] if k in m["metrics"])
        compared = f"{m['candidate']} vs {m['reference']} (n={m['n']})"
        rows.append((model, compared, shown, "pass" if m["passed"] else "FAIL: " + ", ".join(m["failed"])))
    o.table(
        f"check: whole decodes under identical noise (seed={chk['seed']})",
        ["model", "compared", "key metrics", "verdict"],
        rows,
    )
    o.line("check: PASS" if chk["passed"] else "check: FAIL (run `edgekit check BUNDLE` for the full table)")
