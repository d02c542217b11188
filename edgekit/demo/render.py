"""`edgekit demo`'s console tables, stage by stage, and its time per stage."""

from __future__ import annotations

from typing import Any

from edgekit.check.render import print_demo_check
from edgekit.output import Output
from edgekit.profile.render import print_frontier


def print_demo(o: Output, report: dict[str, Any]) -> None:
    """The demo's tables, stage by stage."""
    exp = report["stages"]["export"]
    o.table(
        "export: torch → static ONNX, verified against torch",
        ["model", "bundle", "MB", "max abs err", "verified"],
        [(m, e["bundle"], e["bytes"] / 1e6, e["max_abs_error"], e["verified"]) for m, e in exp.items()],
    )
    q = report["stages"]["decode"]["quality"]
    rows = [
        (
            "masked-demo (MaskGIT, 8 steps)",
            q["masked"]["validity"],
            q["masked"]["event_accuracy"],
            q["masked"]["nll_per_token"],
            "—",
        ),
        ("ar-demo (KV cache, 64 steps)", q["ar"]["validity"], q["ar"]["event_accuracy"], q["ar"]["nll_per_token"], "—"),
        (
            "corpus (true samples)",
            q["corpus"]["validity"],
            q["corpus"]["event_accuracy"],
            q["corpus"]["nll_per_token"],
            "—",
        ),
        ("flow-demo on masked tokens", "—", "—", "—", f"{q['flow']['snr_db']:.1f} dB"),
    ]
    decode = report["stages"]["decode"]
    o.table(
        f"decode quality vs the corpus ground truth (ort fp32, n={decode['n']}, seed={decode['seed']})",
        ["model", "validity", "event acc.", "NLL/token", "SNR vs clean"],
        rows,
    )
    qz = report["stages"]["quantize"]
    rows = []
    for kind, r in qz.items():
        # The budget keys only (`--budget KEY=...`); each is one measure with one name (the
        # ground-truth quality per precision stays in the JSON: flow's snr_db vs clean frames
        # would be a second, different snr_db row here).
        for c in r["budget"]:
            rows.append(
                (kind, c["key"], c["value"], f"{c['op']} {c['limit']:g}: " + ("pass" if c["passed"] else "FAIL"))
            )
        rows.append(
            (
                kind,
                "size MB (FP32 -> INT8)",
                f"{r['sizes']['fp32_bytes'] / 1e6:.2f} -> {r['sizes']['int8_bytes'] / 1e6:.2f}",
                f"{r['sizes']['ratio']:.2f}x",
            )
        )
        speed = r.get("speed") or {}
        if speed.get("measured"):
            rows.append(
                (
                    kind,
                    f"ms per decode (FP32 -> INT8, {speed['isa']})",
                    f"{speed['fp32_ms_per_decode']:.1f} -> {speed['int8_ms_per_decode']:.1f}",
                    f"{speed['int8_speedup']:.2f}x",
                )
            )
    arith = next((r.get("arithmetic") for r in qz.values() if r.get("arithmetic")), None)
    title = "quantize: INT8 vs FP32 (held-out set, identical noise)"
    if arith:
        title += f"; scheme {arith['scheme']['name']} for this {arith['isa']} CPU"
    o.table(title, ["model", "budget metric", "INT8", "limit"], rows)
    print_demo_check(o, report["stages"]["check"])
    b = report["stages"]["build"]
    o.table(
        "build: lint + engine for the cpu target (--precision auto)",
        ["model", "lint", "precision", "engine", "MB", "runtime"],
        [
            (
                k,
                "pass" if s["lint_passed"] else f"{s['lint']['error']} error(s)",
                s["precision"],
                s["engine"],
                s["bytes"] / 1e6,
                s["runtime"],
            )
            for k, s in b.items()
        ],
    )
    for k, s in b.items():
        o.line(f"{k}: {s['precision']} because {s['precision_choice']}")
    prof = report["stages"]["profile"]
    t = prof["table"]  # the full side-by-side table, ratios and sweep are in the HTML report
    eng = prof["engine"]
    o.line(
        f"profile engine: {eng['runtime']}, {eng.get('why') or 'the fastest here'} ("
        + ", ".join(f"{e} {ms:.1f} ms" for e, ms in sorted(eng["median_ms"].items(), key=lambda kv: kv[1]))
        + f" per {eng['precision']} decode, median of {eng['rounds']} interleaved rounds)"
    )
    o.table(
        f"profile: masked-demo on {eng['runtime']} ({prof.get('rows', '?')} rows per decode)",
        t["summary"]["columns"],
        t["summary"]["rows"],
    )
    for line in t["not_measured"] + ([t["nar_vs_ar"]] if t.get("nar_vs_ar") else []):
        o.line(line)
    print_frontier(o, t, prof.get("frontier"))
    o.line(f"profile report: {prof['html']} (JSON: {prof['json']})")
    npu = report["stages"].get("npu")
    if npu:
        _print_npu(o, npu)
    if report.get("timing"):
        print_timing(o, report["timing"])


def print_timing(o: Output, timing: dict[str, Any]) -> None:
    """The wall and CPU seconds of each stage, and the whole run in minutes with the machine."""
    rows = [(name, t["wall_s"], t["cpu_s"]) for name, t in timing["stages"].items()]
    o.table(
        "demo: time per stage (seconds)",
        ["stage", "wall", "CPU"],
        [*rows, ("total", timing["wall_s"], timing["cpu_s"])],
    )
    load = timing.get("load_avg_end")
    o.line(
        f"demo took {_minutes(timing['wall_s'])} wall, {_minutes(timing['cpu_s'])} CPU"
        f" on {timing.get('cpu') or 'this CPU'}"
        f" ({timing.get('cores') or '?'} cores" + (f", load average {load[0]:g} at the end)" if load else ")")
    )


def _minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def _print_npu(o: Output, npu: dict[str, Any]) -> None:
    if "skipped" in npu:
        o.line(f"NPU stage skipped: {npu['skipped']}")
        return
    q, b, c = npu["quantize"], npu["build"], npu["check"]
    rows = [
        (
            "quantize (qnn profile)",
            c_["key"],
            c_["value"],
            f"{c_['op']} {c_['limit']:g}: " + ("pass" if c_["passed"] else "FAIL"),
        )
        for c_ in q["checks"]
    ]
    rows.append(
        (
            "quantize (qnn profile)",
            "activations at 8 bit",
            q["share_8bit"],
            f"{q['promoted_16bit']} tensor(s) at 16 bit",
        )
    )
    rows += [
        ("check qnn:int8 vs ort:fp32", k, v, "FAIL" if k in c["failed"] else "")
        for k, v in c["metrics"].items()
        if k in ("token_agreement", "top1_agreement", "logits_kl") or k.startswith("quality_drop.event")
    ]
    rows.append(("check qnn:int8 vs ort:fp32", "verdict", "pass" if c["passed"] else "FAIL", ", ".join(c["failed"])))
    s = b["session_seconds"]
    rows.append(
        (
            f"build {npu['target']}",
            f"context binary ({b['device']})",
            b["bytes"] / 1e6,
            f"MB; session {s['load_precompiled']:.2f} s loaded vs {s['compile']:.2f} s compiling",
        )
    )
    o.table(
        f"NPU: masked-demo on {npu['target']} ({q['measured_on']}; {npu['note']})",
        ["stage", "metric", "value", ""],
        rows,
    )
