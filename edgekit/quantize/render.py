"""`edgekit quantize`'s console output: the summary, the float nodes, the budget table, the
ground truth, the fallback order and the range drift."""

from __future__ import annotations

from edgekit.output import Output


def print_quantize(o: Output, s: dict) -> None:
    sel = s["selection"]
    o.pairs(f"quantize {s['bundle']}", _summary_pairs(s))
    o.table(
        "kept in float (torch module and FP32 graph node: names other tools know; why)",
        ["module", "FP32 node", "op", "source", "reason"],
        [(r.get("module"), fp32_names(r), r["op"], r["source"], r["reason"]) for r in sel["float"]],
    )
    _print_accuracy(o, s)
    qf, qi = s["measured"].get("quality_fp32") or {}, s["measured"].get("quality_int8") or {}
    if qf:
        o.table("ground truth, FP32 vs INT8", ["metric", "FP32", "INT8"], [(k, qf[k], qi.get(k)) for k in qf])
    if s["fallback"]:
        o.table(
            "budget fallback, most sensitive first (SQNR dB: output with only this node INT8; noise it adds locally)",
            ["#", "module", "FP32 node", "output SQNR alone", "added locally"],
            [
                (i + 1, f.get("module"), fp32_names(f), f.get("isolated_output_sqnr_db"), f.get("added_sqnr_db"))
                for i, f in enumerate(s["fallback"])
            ],
        )
    where = {"masked": "mask share", "flow": "t", "ar": "position"}[s["kind"]]
    o.table(
        (
            f"activation range drift across decode steps ({s['range_drift']['tensors']} INT8 input tensors; share "
            "= step max|x| / calibrated max|x|)"
        ),
        ["network calls", where, "mean share", "min share", "narrowest tensor"],
        [
            (
                span(r["calls"], "d"),
                span(r["position"], ".3g"),
                r["mean_share"],
                r["min_share"],
                # a null condition (guidance's unconditional calls) is exactly zero: no range to use
                r["min_tensor"] + (f" ({r['zero_tensors']} all zero, not counted)" if r.get("zero_tensors") else ""),
            )
            for r in s["range_drift"]["steps"]
        ],
    )
    _print_buckets(o, s.get("step_buckets"), where)
    _print_speed(o, s)
    q = s.get("qnn")
    if q:
        _print_qnn(o, s, q)
    o.line(
        f"wrote {s['bundle']}/{s['artifact']['int8']} (run it: edgekit run {s['bundle']} --precision int8"
        + (" --runtime qnn)" if q else ")")
    )


def _print_accuracy(o: Output, s: dict) -> None:
    """The budget's checks beside every other measured metric (held-out set)."""
    checks = s["budget"]["checks"]
    reported = [
        (k, "—", v, "reported")
        for k, v in s["measured"].items()
        if not k.startswith("quality") and k not in {c["key"] for c in checks} and isinstance(v, (int, float))
    ]
    reported += [(f"check: {k}", "—", v, "reported") for k, v in (s["measured"].get("check_metrics") or {}).items()]
    o.table(
        "accuracy vs budget (held-out set, identical noise on FP32 and INT8)",
        ["metric", "limit", "INT8 vs FP32", ""],
        [
            (
                c["key"],
                f"{c['op']} {c['limit']:g}",
                c["value"],
                {True: "pass", False: "FAIL", None: "not measured"}[c["passed"]],
            )
            for c in checks
        ]
        + reported,
    )


def _summary_pairs(s: dict) -> dict[str, str]:
    """The summary's header: model, profile, calibration, INT8 share and size, the verdict."""
    sizes, share, cal = s["sizes"], s["int8_flop_share"], s["calibration"]
    sel = s["selection"]
    return {
        "model": f"{s['model']} ({s['kind']})",
        "profile / method": f"{s['profile']} / {s['method']}",
        "calibration": (
            f"{cal['samples']} sequences in {cal['decodes']} FP32 decode(s): {cal['feeds']} recorded network "
            f"calls, {cal['calls_per_decode']} per decode"
        )
        + (
            f" (one call in {cal['every_nth_call']} kept: the recording's memory bound)"
            if cal.get("every_nth_call", 1) > 1
            else ""
        ),
        "INT8 nodes": f"{len(sel['int8'])} ({', '.join(sorted({r['op'] for r in sel['int8']}))})",
        "INT8 share of FLOPs": f"{pct(share['matmul'])} of MatMul/Gemm, {pct(share['weighted'])} incl. Conv",
        "size": (
            f"{sizes['fp32_bytes'] / 1e6:.2f} MB fp32 -> "
            f"{sizes['int8_bytes'] / 1e6:.2f} MB int8 ({sizes['ratio']:.2f}x)"
        ),
        "kept float by op type": ", ".join(f"{k} x{v}" for k, v in sel["float_by_op_type"].items()) or "—",
        **_storage(s),
        "conditions": (s.get("conditions") or {}).get("source", "—"),
        "pre-processing": _preprocessing(s.get("preprocess") or {}),
        "budget": "met" if s["passed"] else "NOT met",
    } | ({"peak memory": _memory(s["memory"])} if s.get("memory") else {})


def _storage(s: dict) -> dict[str, str]:
    """The written model's 8-bit share of weight values, and its embedding tables (int8 or float, why)."""
    out = {}
    w = s.get("weights") or {}
    if w.get("int8_share") is not None:
        out["weights stored 8-bit"] = f"{pct(w['int8_share'])} of values ({w['bytes']['int8'] / 1e6:.2f} MB)"
    tables = s.get("gather_tables") or {}
    if tables.get("int8") or tables.get("float"):
        shown = [f"{t['label']} {'x'.join(map(str, t['shape']))} int8" for t in tables["int8"]]
        shown += [f"{t['label']} float ({t['reason']})" for t in tables["float"]]
        out["embedding tables"] = "; ".join(shown)
    return out


def _memory(m: dict) -> str:
    """The process's peak against the FP32 weights and the goal (``quantize/memory.py``)."""
    shown = f"{m['peak_rss_bytes'] / 2**30:.2f} GiB"
    if not m.get("fp32_weight_bytes"):
        return shown
    goal = "within" if m["within_goal"] else "over"
    return (
        f"{shown}, {m['ratio']:.2f}x the {m['fp32_weight_bytes'] / 2**30:.2f} GiB of FP32 weights "
        f"({goal} the goal of {m['goal_weight_factor']}x + one call's activations: {m['goal_bytes'] / 2**30:.2f} GiB)"
    )


def _preprocessing(doc: dict) -> str:
    """How the graph was prepared for the quantizer, and what failed on the way."""
    why = doc.get("skipped_because")
    if not doc.get("applied", True):
        return f"skipped: {why}"
    how = {"ort-optimization": "ORT's graph optimization"}.get(doc.get("how", ""), "quant_pre_process")
    return f"{how} ({why})" if why else how


def _print_buckets(o: Output, b: dict | None, where: str) -> None:
    """--step-buckets: what each count measured, the chosen ranges, and where they pay."""
    if not b:
        return
    if b.get("tried"):
        meta = ("n", "boundaries", "passed", "margin", "measured_on", "memory_ratio", "skipped")
        limits = [k for k in b["tried"][0] if k not in meta]
        memory = any("memory_ratio" in r for r in b["tried"])
        o.table(
            "step buckets tried (every selected node INT8; the search then falls back or promotes)",
            ["buckets", f"{where} edges", *limits, *(["memory vs one scale"] if memory else []), "budget"],
            [
                (
                    r["n"],
                    ", ".join(f"{e:.3g}" for e in r["boundaries"]) or "—",
                    *(r.get(k) for k in limits),
                    *([_ratio(r.get("memory_ratio")) if r["n"] > 1 else "1.00x"] if memory else []),
                    f"not tried ({r['skipped']})" if r.get("skipped") else "met" if r["passed"] else "not met",
                )
                for r in b["tried"]
            ],
        )
    if b.get("n", 1) > 1:
        edges = [None, *b["boundaries"], None]
        o.table(
            (
                f"step buckets: {b['n']} by {b['by']} (activation scales "
                f"each; weights shared: {b.get('weights_file', '—')})"
            ),
            ["bucket", f"{where} from", "to", "calls"],
            [
                (
                    i,
                    "—" if edges[i] is None else f"{edges[i]:.3g}",
                    "—" if edges[i + 1] is None else f"{edges[i + 1]:.3g}",
                    c,
                )
                for i, c in enumerate(b.get("calls_per_bucket", []))
            ],
        )
    steps = b.get("per_step")
    if steps and steps["one_scale_db"]:
        one, many = steps["one_scale_db"], steps["bucketed_db"]
        o.line(
            f"per-step output SNR vs FP32 (teacher-forced): one scale {min(one):.1f}..{max(one):.1f} dB, "
            f"{b.get('n', 1)} buckets {min(many):.1f}..{max(many):.1f} dB"
        )


def _ratio(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.2f}x"


def _print_speed(o: Output, s: dict) -> None:
    sp = s.get("speed") or {}
    if sp.get("measured"):
        speedup = "not measured" if sp["int8_speedup"] is None else f"{sp['int8_speedup']:.2f}x"
        noise = f", within noise ({'; '.join(sp['unsure'])})" if sp.get("verdict") == "within noise" else ""
        o.line(
            f"INT8 vs FP32 per decode on this {sp['isa']} CPU ({sp['runtime']}): {sp['int8_ms_per_decode']:.1f} vs "
            f"{sp['fp32_ms_per_decode']:.1f} ms, {speedup}{noise}"
        )
    arith = s.get("arithmetic")
    if arith:
        o.line(
            f"arithmetic: scheme {arith['scheme']['name']} for {arith['isa']} "
            f"CPUs (budget measured on {arith.get('validated_on')}; "
            f"saturates on: {', '.join(arith.get('saturates_on') or []) or 'none'})"
        )


def _print_qnn(o: Output, s: dict, q: dict) -> None:
    """The qnn profile's own tables: where the budget was measured, the 16-bit promotions, the search."""
    share = "—" if q["share_8bit"] is None else f"{q['share_8bit']:.0%}"
    o.pairs(
        "Hexagon NPU (HTP) quantization",
        {
            "budget measured on": s["budget"].get("measured_on", "qnn HTP backend"),
            "HTP": (
                f"v{q['htp_arch']} soc_model {q['soc_model']} (QNN SDK "
                f"{q['qnn_sdk']}, onnxruntime-qnn {q['onnxruntime_qnn']})"
            ),
            "activations at 8 bit": (
                f"{share} of {q['activation_tensors']} tensors "
                f"({q.get('activations_16bit', q['promoted_16bit'])} at 16 bit"
            )
            + (
                f"; per call, by step bucket: {', '.join(str(n) for n in q['activations_16bit_per_bucket'])})"
                if q.get("activations_16bit_per_bucket")
                else ")"
            ),
            "weights at 16 bit (MatMul, Gather tables)": q.get("weights_16bit", 0),
            "weights": q["weights"],
        },
    )
    if q["promotions"]:
        o.table(
            "promoted to 16 bit: by rule and override, then by output noise per activation put at 16 bit "
            "(output SNR: the network's outputs with only that tensor at 8 bit)",
            ["#", "tensor", "step bucket", "kind", "produced by", "output SNR dB", "why"],
            [
                (
                    p["step"],
                    p["tensor"],
                    "all" if p.get("bucket") is None else p["bucket"],
                    p.get("kind", "activation"),
                    p["produced_by"],
                    p.get("output_snr_db"),
                    p.get("why", "budget"),
                )
                for p in q["promotions"]
            ],
        )
    limits = list(s["budget"]["limits"])
    o.table(
        "budget search (the CPU EP only narrows it; the HTP backend decides)",
        ["backend", "16-bit tensors", *limits, "passed"],
        [(h["backend"], h["promoted"], *(h.get(k) for k in limits), h["passed"]) for h in s["budget"]["history"]],
    )


def fp32_names(row: dict) -> str:
    """The FP32 graph's node(s) a float row came from; the prepared graph's name where none is known."""
    return ", ".join(row.get("fp32_nodes") or []) or f"{row['node']} (prepared graph)"


def pct(value) -> str:
    return "—" if value is None else f"{value:.0%}"


def span(pair: list, fmt: str) -> str:
    lo, hi = (format(v, fmt) for v in pair)
    return lo if lo == hi else f"{lo}–{hi}"
