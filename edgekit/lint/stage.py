"""`edgekit lint` over a bundle: which artifacts a target runs, the quantization profile rule, and the
``edgekit.lint/1`` document."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from edgekit.arithmetic import PAIR_LIMIT, arithmetic_for, int8_weight_pairs
from edgekit.bundle import Bundle
from edgekit.host import HostFacts
from edgekit.lint.findings import SEVERITIES, Finding, sort_findings
from edgekit.lint.graph import lint_onnx
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.targets import Target, load_target

LINT_SCHEMA = "edgekit.lint/1"


def lint_bundle(path: str | Path | Bundle, target: str | Path | Target = "cpu") -> list[Finding]:
    """Every finding for the ONNX artifacts ``target`` would run (``fp32`` always, ``int8``
    when the target runs int8 and the bundle has it), errors first."""
    bundle = path if isinstance(path, Bundle) else Bundle.load(path)
    target = load_target(target)
    io_shapes = {n: s.shape for n, s in (*bundle.inputs.items(), *bundle.outputs.items())}
    findings: list[Finding] = []
    for name in ("fp32", "int8", "fp16"):
        if not bundle.has(name):
            if name == "int8" and "int8" in target.precisions:
                findings.append(
                    Finding(
                        "info",
                        "precision",
                        name,
                        f"bundle has no int8 model; target {target.name} runs int8",
                        hint=f"make one with `edgekit quantize {bundle.root} --profile {target.quantization_profile}`",
                    )
                )
            continue
        if name != "fp32" and name not in target.precisions:
            continue
        found = lint_onnx(bundle.path_of(name), target, artifact=name, io_shapes=io_shapes)
        if name == "int8":
            wrong_profile = _quantization_profile_findings(bundle, target)
            if wrong_profile:
                found = collapse_refusals(found, quantization_profile_of(bundle) or "")
            found += wrong_profile + _arithmetic_findings(bundle, target)
        findings += found
    return sort_findings(findings)


def lint_report(path: str | Path, target: str | Path | Target = "cpu") -> dict[str, Any]:
    """``lint_bundle`` as the ``edgekit lint --json`` document (``edgekit.lint/1``)."""
    bundle = Bundle.load(path)
    target = load_target(target)
    findings = lint_bundle(bundle, target)
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    return {
        "schema": LINT_SCHEMA,
        "bundle": str(bundle.root),
        "target": target.name,
        "passed": counts["error"] == 0,
        "counts": counts,
        "findings": [f.to_json() for f in findings],
    }


def collapse_refusals(findings: list[Finding], profile: str) -> list[Finding]:
    """An int8 model quantized for another profile has most of its nodes refused by the NPU (a
    90 M-parameter Llama of the cpu profile: 75 lines, one per DequantizeLinear): the consequence
    of the profile, which its own finding fixes. The refusals become one finding, counted by op."""
    refused = [f for f in findings if f.rule == "npu-refused"]
    if len(refused) < 2:
        return findings
    ops = Counter(f.op or "unknown op" for f in refused)
    counted = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in ops.most_common())
    one = Finding(
        "error",
        "npu-refused",
        refused[0].artifact,
        f"{refused[0].by or 'the NPU'} refused {len(refused)} nodes of this {profile}-profile int8 model ({counted})",
        hint=refused[0].hint,
        nodes=tuple(n for f in refused for n in f.nodes),
        by=refused[0].by,
    )
    return [f for f in findings if f.rule != "npu-refused"] + [one]


def _quantization_profile_findings(bundle: Bundle, target: Target) -> list[Finding]:
    profile = quantization_profile_of(bundle)
    if profile is None or profile == target.quantization_profile:
        return []
    return [
        Finding(
            "error",
            "qdq",
            "int8",
            (
                f"the int8 model was quantized with profile {profile!r}; target {target.name} needs "
                f"{target.quantization_profile!r}"
            ),
            hint=f"re-quantize with `edgekit quantize {bundle.root} --profile {target.quantization_profile}`",
        )
    ]


def _arithmetic_findings(bundle: Bundle, target: Target) -> list[Finding]:
    """An int8 model whose u8s8 GEMMs can saturate the target CPU's kernels (x86 without VNNI:
    int16 pair sums), with the command that re-quantizes it for the target."""
    if not target.profile_facts.cpu_arithmetic or quantization_profile_of(bundle) not in (
        None,
        target.quantization_profile,
    ):
        return []
    isa = HostFacts.detect().isa_class if target.isa == "host" else target.isa
    if not arithmetic_for(isa).saturating_pairs:
        return []
    int8 = bundle.path_of("int8")
    model = load_onnx(int8, "artifact 'int8'")  # without its weights: each is read from beside it when checked
    bad = {n: p for n, p in int8_weight_pairs(model, int8.parent).items() if p > PAIR_LIMIT}
    if not bad:
        return []
    worst = max(bad.values())
    q = bundle.quantization
    made_for = (q.arithmetic.isa if q is not None and q.arithmetic is not None else None) or "an unrecorded CPU class"
    return [
        Finding(
            "error",
            "int8-arithmetic",
            "int8",
            f"{len(bad)} INT8 layer(s) can saturate the {isa} CPU's "
            f"u8s8 kernel of target {target.name}: their weight pairs "
            f"sum to {worst} > {PAIR_LIMIT}, so u8 activations above {32767 // worst} overflow its int16 pair sums "
            f"(the model was quantized for {made_for})",
            hint=f"re-quantize for this target: `edgekit quantize {bundle.root} --target {target.name}`",
            nodes=tuple(sorted(bad)),
        )
    ]


def quantization_profile_of(bundle: Bundle) -> str | None:
    """The ``edgekit quantize --profile`` the bundle's int8 model came from, if recorded."""
    q = bundle.quantization
    return (q.profile if q is not None else None) or (
        bundle.artifact("int8").config.get("profile") if bundle.has("int8") else None
    )
