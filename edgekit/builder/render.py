"""`edgekit build`'s console output: lint warnings, the engine entry, where it was written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.output import Output


def print_build(o: Output, doc: dict[str, Any]) -> None:
    e = doc["engine"]
    if doc.get("precision_choice"):
        o.line(f"precision {doc['precision']} (auto): {doc['precision_choice']}")
    for w in doc["warnings"]:
        o.warn(w)
    for f in doc["lint"]:
        if f["severity"] == "warning":
            o.warn(f"{f['artifact']}: {f['message']}")
    o.pairs(
        f"{doc['key']}: {doc['status']}",
        {
            "MB": e["bytes"] / 1e6,
            "runtime": f"{e['runtime']} {e['runtime_version']}",
            "format": e["format"],
            "device": e["device"],
            "compute capability": e["compute_capability"],
            "L4T": e["l4t"],
            "from": f"{e['source']} (sha256 {e['source_onnx_sha256'][:12]}…)",
            "fixed shapes": e.get("fixed_shapes") or None,
        },
    )
    if e.get("aihub"):
        a = e["aihub"]
        o.line(
            (
                f"AI Hub: {a['device']} ({a.get('chipset')}), QAIRT {a.get('qairt')}, compile jobs "
                f"{', '.join(a['compile_jobs'])}"
            )
            + (
                f", link job {a['link_job']} ({len(a.get('graphs') or [])} graphs over shared weights)"
                if a.get("link_job")
                else ""
            )
        )
    for note in e.get("notes") or []:
        o.line(f"note: {note}")
    if e.get("route"):  # OpenVINO: the routes measured and the one shipped
        r = e["route"]
        o.line(f"route: {r['shipped']}: {r['why']}")
        for name, row in r["routes"].items():
            if "median_ms" in row:
                state = "kept" if row["kept"] else "over budget"
                o.line(
                    f"  {name}: {row['median_ms']:.3f} ms per forward, {row['snr_vs_fp32_db']:.1f} dB vs FP32 ({state})"
                )
            else:
                o.line(f"  {name}: {row.get('note') or row.get('unavailable')}")
    o.line(f"engine: {Path(doc['bundle']) / e['path']}")
    if e.get("weights"):
        o.line(f"weights: {Path(doc['bundle']) / e['weights']['path']}")
    if e.get("required_operators"):
        o.line(
            "required operators (for a minimal onnxruntime build): "
            f"{Path(doc['bundle']) / e['required_operators']['path']}"
        )
