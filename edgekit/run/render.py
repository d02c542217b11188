"""`edgekit run`'s console output, and the latency-budget plan as `run` and `profile` report it."""

from __future__ import annotations

from typing import Any

from edgekit.output import Output
from edgekit.run.budget import Plan


def print_plan(o: Output, budget_ms: float, plan: Plan) -> None:
    """The flow decode plan for this device, said on stderr."""
    o.info(
        f"budget {budget_ms:g} ms: {plan.solver} x {plan.steps} steps ({plan.nfe} NFE x {plan.per_nfe_ms:.3f} ms "
        f"= {plan.expected_ms:.2f} ms expected, {plan.expected_snr:.1f} dB vs the 128-NFE reference)"
    )


def budget_doc(budget_ms: float, plan: Plan) -> dict[str, Any]:
    """The "budget" entry of the --json document of `run` / `profile`."""
    return {
        "budget_ms": budget_ms,
        "solver": plan.solver,
        "steps": plan.steps,
        "nfe": plan.nfe,
        "expected_ms": plan.expected_ms,
        "expected_snr_db": plan.expected_snr,
        "per_nfe_ms": plan.per_nfe_ms,
    }


def print_run(o: Output, result: dict[str, Any], title: str) -> None:
    for w in result["warnings"]:
        o.warn(w)
    decodes = result.get("decode_calls", 1)
    summary = {
        "model": f"{result['model']} ({result['kind']})",
        "runtime": f"{result['runtime']} on {result['device']}",
        "precision": result["precision"],
        "batch": result["batch"],
        "steps": result["steps"],
        "NFE per decode": result["nfe"],
        f"runtime calls ({decodes} decode{'s' if decodes != 1 else ''})": result["runtime_calls"],
        "wall ms": result["wall_ms"],
    }
    summary |= {
        f"{result['runtime']}: {k}": v
        for k, v in result.get("runtime_settings", {}).items()
        if k != "runtime_requirements"
    }
    if result.get("timing_note"):
        summary["wall ms"] = f"{result['wall_ms']:.1f} ({result['timing_note']})"
    sess = result.get("session")
    if sess:
        line = (
            f"{sess['seconds'] * 1e3:.0f} ms "
            f"({'precompiled context loaded' if sess['precompiled'] else 'graph compiled at load'})"
        )
        if sess.get("saved_seconds") is not None:
            line += (
                f"; compiling took {sess['compile_seconds_at_build'] * 1e3:.0f} ms at build: "
                f"{sess['saved_seconds'] * 1e3:.0f} ms saved"
            )
        summary["session creation"] = line
    summary |= {k: v for k, v in result["decode"].items() if k not in ("seed",)}
    for k, v in (result["quality"] or {}).items():
        summary[f"quality: {k}"] = v
    o.pairs(title, summary)
    if result.get("out") is not None:
        o.line(f"wrote {result['out']}")
