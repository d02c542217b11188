"""`edgekit doctor` console output."""

from __future__ import annotations

from typing import Any

from edgekit.output import Output


def print_doctor(o: Output, doc: dict[str, Any], one_target: bool) -> None:
    """This host, then every target in one table, or one target's runtimes, device, power and
    what is missing (install lines as plain lines: they must survive copy and paste)."""
    env = doc["environment"]
    o.pairs(
        "this host",
        {
            **doc["host"],
            "cpu_isa": " ".join(doc["host"].get("cpu_isa") or []) or "—",
            "onnxruntime": env["onnxruntime"],
            "ORT providers": ", ".join(env["providers"]),
            "tensorrt": env["tensorrt"],
            "onnxruntime-qnn": env.get("onnxruntime_qnn")
            and f"{env['onnxruntime_qnn']} (QNN SDK {env.get('qnn_sdk')})",
            "gpu": env["gpu"] and f"{env['gpu']['name']} (sm {env['gpu']['compute_capability']})",
            "openvino": env.get("openvino")
            and f"{env['openvino']} (devices: {', '.join(env.get('openvino_devices') or {}) or 'none'})",
        },
    )
    if not one_target:
        o.table(
            "targets",
            ["target", "runs with", "device here", "power probe", "missing"],
            [
                (
                    t["target"],
                    t["runs_with"],
                    t["device"]["matches"],
                    t["power"]["probe"] if t["power"]["available"] else "unavailable",
                    len(t["missing"]),
                )
                for t in doc["targets"]
            ],
        )
        o.line("details and install lines: edgekit doctor --target NAME")
        return
    t = doc["targets"][0]
    o.table(
        f"target {t['target']}: runtimes in order",
        ["runtime", "usable here", "version", "providers / problems"],
        [
            (
                r["runtime"],
                r["available"],
                r["version"],
                ", ".join(r.get("providers") or r.get("problems") or r.get("notes") or []),
            )
            for r in t["runtimes"]
        ],
    )
    power = t["power"]
    o.pairs(
        "device and power",
        {
            "this host is the device": t["device"]["matches"] or "; ".join(t["device"]["reasons"]),
            "power probe": power["probe"] if power["available"] else f"unavailable: {power['reason']}",
        },
    )
    for r in t["runtimes"]:
        for limit in r.get("limits") or []:
            o.line(f"limit: {limit}")
        if "configured" in r:  # a device cloud (AI Hub): whether a client is configured, and the devices it would use
            conf = r["configuration"]
            o.line(
                f"{r['runtime']}: "
                + (
                    f"client configured from {conf['source']}"
                    if r["configured"]
                    else f"no client configured ({conf['problem']})"
                )
                + f"; devices: {', '.join(r['devices']) or 'none named by the target'}"
            )
    for m in t["missing"]:
        o.line(f"missing: {m['what']}" + (f" ({m['why']})" if m.get("why") else ""))
        if m.get("install"):
            o.line(f"    {m['install']}")
    o.line(
        f"{t['target']}: "
        + (
            f"ready (runs with {t['runs_with']})"
            if t["ready"]
            else "not ready here" + (f"; runs with {t['runs_with']} for testing" if t["runs_with"] else "")
        )
    )
