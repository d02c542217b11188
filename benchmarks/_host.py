"""What every recorded benchmark run says about where it ran: the machine (CPU model, cores, ISA
class and features, optionally memory) and the versions of the packages that made the figure.
One definition, so the records of ``demo_time``, ``real_size`` and ``quantize_vs_nncf`` describe a
host the same way."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CORE = ("edgekit", "onnxruntime", "onnx", "openvino", "torch", "numpy")


def versions(names: Iterable[str] = CORE) -> dict[str, str | None]:
    """{distribution: its installed version, or None where it is not installed}."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def machine(memory: bool = False) -> dict[str, Any]:
    """The host as ``edgekit.host`` reads it: CPU model, cores, arch, ISA class and features; with
    ``memory``, the RAM in GiB (/proc/meminfo)."""
    from edgekit.host import HostFacts, cpu_identity

    facts, cpu = HostFacts.detect(), cpu_identity()
    out: dict[str, Any] = {
        "cpu": cpu["model"],
        "cores": cpu["cores"],
        "arch": facts.arch,
        "isa_class": facts.isa_class,
        "isa": list(facts.isa),
    }
    if memory:
        with open("/proc/meminfo") as f:
            total_kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
        out["memory_gib"] = round(total_kb / 2**20, 1)
    return out
