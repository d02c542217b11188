"""Qualcomm AI Hub (``aihub``): the bundle's model compiled, profiled and run on AI Hub's hosted
Snapdragon devices (phones, laptops, IoT boards) through Qualcomm's own client, ``qai-hub``.

It takes the models the Hexagon NPU takes (``qnn``'s: the int8 model of ``edgekit quantize
--profile qnn``, or the fp32 model computed in float16). Nothing runs in this process: a build
is a compile job (and a link job for step buckets), a profile one profile job per device, a
check inference jobs on recorded step inputs (``builder/aihub.py``, ``profile/aihub.py``,
``check/aihub.py``). ``client`` wraps the client, ``jobs`` keeps every job id in the bundle.
Importing this package imports nothing heavy; the client loads when a job is submitted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.manifest_sections import EngineRecord
from edgekit.runtimes.qnn import QNN  # imports onnxruntime-qnn only when a function runs
from edgekit.runtimes.registry import (
    Backend,
    EngineHooks,
    Requirement,
    register_backend,
)

INSTALL = "pip install 'edgekit[aihub]'"
# What `--runtime aihub` is instead of an in-process runtime: one command each.
COMMANDS = (
    "build it with `edgekit build BUNDLE --target snapdragon-8-gen-3 --runtime aihub`, profile it with "
    "`edgekit profile BUNDLE --runtime aihub --devices NAME`, "
    "check it with `edgekit check BUNDLE --runtime aihub --device NAME`"
)


def _not_in_process(*_: Any) -> Any:
    raise UsageError(
        "--runtime aihub runs on Qualcomm AI Hub's hosted devices as jobs, not as a runtime in this process "
        "(one job per decode step would take minutes each)",
        hint=COMMANDS,
    )


def _check_host(target: Any, host: Any, precision: str) -> tuple[str | None, list[str]]:
    devices = ", ".join(target.aihub.devices) or "its AI Hub devices"
    return (
        f"target {target.name}'s aihub engine runs on AI Hub's hosted devices ({devices}), not on this host: "
        "`edgekit profile/check BUNDLE --runtime aihub`"
    ), []


def _engine_problems(path: Path, entry: EngineRecord, host: Any, target: Any, facts: Any) -> list[str]:
    """A context binary from AI Hub runs on the chipset it was compiled for; the target may since
    name devices of another one."""
    built = entry.aihub
    if target is None or not target.aihub.devices:
        return []
    same_device = built.get("device") in target.aihub.devices
    same_chip = bool(target.aihub.chipset) and built.get("chipset") == target.aihub.chipset
    if same_device or same_chip:
        return []
    return [
        f"compiled on AI Hub for {built.get('device')} ({built.get('chipset') or 'chipset unknown'}), "
        f"target {target.name} now names {', '.join(target.aihub.devices)}"
    ]


AIHUB = register_backend(
    Backend(
        name="aihub",
        title="Qualcomm AI Hub",
        help="Qualcomm AI Hub's hosted Snapdragon devices: compile, profile and check jobs through the qai-hub client",
        # AI Hub compiles for the same Hexagon NPU as ``qnn``: its precisions, models and checks.
        precisions=QNN.precisions,
        artifacts=QNN.artifacts,
        check_artifact=QNN.check_artifact,
        open=_not_in_process,
        lacks=QNN.lacks,
        requires=Requirement("qai_hub", INSTALL, extra="aihub"),
        quantize_profile=QNN.quantize_profile,
        hosted=True,
        engine=EngineHooks(check_host=_check_host, problems=_engine_problems, open=_not_in_process, runs_unbuilt=False),
    )
)

__all__ = ["AIHUB", "COMMANDS", "INSTALL"]
