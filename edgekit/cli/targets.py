"""Targets and engines: `targets`, `doctor`, `build`, `lint`."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

import typer

from edgekit._lock import LOCK_WAIT
from edgekit.cli.app import BundleArg, JsonOpt, TargetOpt, command, configure_logging, WaitOpt
from edgekit.output import Output


@command(epilog="Examples:\n\n  edgekit targets\n\n  edgekit targets --json")
def targets(json_out: JsonOpt = False) -> None:
    """List the deployment targets edgekit ships (runtimes, precisions, power probe)."""
    from edgekit.doctor.render import print_targets
    from edgekit.targets import list_targets

    o = Output(json_out)
    found = list_targets()
    o.document({"schema": "edgekit.targets/1", "targets": [t.to_json() for t in found]})
    print_targets(o, found)


@command(epilog="Examples:\n\n  edgekit doctor\n\n  edgekit doctor --target jetson-orin-nano --json")
def doctor(
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="Check one target (name or .toml); default: every built-in target.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Say what this host can run for a target, and what is missing (with the install line)."""
    from edgekit.doctor import doctor as run_doctor
    from edgekit.doctor.render import print_doctor

    o = Output(json_out)
    doc = run_doctor(target)
    o.document(doc)
    print_doctor(o, doc, one_target=target is not None)


@command(epilog="Examples:\n\n  edgekit build bundles/masked --target cpu\n\n"
         "  edgekit build bundles/masked --target android-arm64   # writes the .ort model\n\n"
         "  edgekit build bundles/masked --target jetson-orin-nano --precision int8   # on the Jetson")
def build(
    bundle: BundleArg,
    target: TargetOpt = "cpu",
    precision: Annotated[Literal["fp32", "fp16", "int8"], typer.Option("--precision", help="fp16: TensorRT only; int8: after `edgekit quantize`.")] = "fp32",
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild even when an engine exists (required for a stale one).")] = False,
    wait: WaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Build a bundle's engine for a target: optimized .onnx / .ort for ONNX Runtime, a TensorRT plan on the device."""
    configure_logging()
    from edgekit.build import build_bundle
    from edgekit.build.render import print_build

    o = Output(json_out)
    LOCK_WAIT.set(wait)
    doc = build_bundle(bundle, target, precision, rebuild)
    o.document(doc)
    print_build(o, doc)


@command(epilog="Examples:\n\n  edgekit lint bundles/masked --target jetson-orin-nano\n\n  edgekit lint bundles/masked --target android-arm64 --json")
def lint(bundle: BundleArg, target: TargetOpt = "cpu", json_out: JsonOpt = False) -> None:
    """Check that a bundle's graphs will deploy to a target (exit 4 on an error-level finding)."""
    from edgekit.lint import lint_report
    from edgekit.lint.render import print_lint

    o = Output(json_out)
    doc = lint_report(bundle, target)
    o.document(doc)
    print_lint(o, doc)
    if not doc["passed"]:
        raise typer.Exit(4)
