"""What this host is, read from files only: architecture, CPU model, board, Jetson L4T release,
whether an NVIDIA GPU is visible, and whether an optional module is importable.

Engines are keyed to these facts (``runtimes.engines``), ``doctor`` reports them and the system
probe logs them; they live here, below all three, so none of them reaches into another. Every
reader takes ``root`` so tests can lay out a fake ``/proc`` and ``/etc`` in a temporary folder.
"""

from __future__ import annotations

import importlib.util
import logging
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

L4T_RELEASE_PATH = Path("/etc/nv_tegra_release")
# Architecture names as platform.machine() spells them on other systems -> edgekit's.
ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8l": "aarch64"}


def under(root: str | Path, path: str) -> Path:
    """``path`` (absolute, as on the device) re-rooted under ``root``."""
    return Path(root) / path.lstrip("/")


# CPU features (as /proc/cpuinfo spells them) that decide how fast int8/bf16 kernels run: x86
# VNNI (int8 dot products), AMX (int8/bf16 tiles), AVX512-BF16/FP16; ARM dot product, i8mm,
# bf16, SVE. Logged with every measurement (the same command differs by these across hosts) and
# part of an OpenVINO CPU blob's compatibility key.
ISA_FEATURES = (
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "amx_fp16",
    "asimd",
    "asimddp",
    "i8mm",
    "bf16",
    "sve",
    "sve2",
)


def cpu_isa(cpuinfo_text: str) -> list[str]:
    """The ``ISA_FEATURES`` this CPU has, from /proc/cpuinfo's first ``flags`` (x86) or
    ``Features`` (ARM) line, in ``ISA_FEATURES`` order."""
    m = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", cpuinfo_text, re.MULTILINE)
    have = set(m.group(1).split()) if m else set()
    return [f for f in ISA_FEATURES if f in have]


# The int8 arithmetic classes of CPUs (``isa_class``): what an INT8 GEMM computes with differs by
# class, so a quantization scheme is chosen per class (``edgekit.arithmetic``).
#   avx2         x86 with AVX2, no VNNI (AMD Zen 1-3, Intel before Ice Lake/Cascade Lake, Atom/Celeron
#                N-series): u8·s8 products summed in pairs into int16 that SATURATE (vpmaddubsw)
#   avx512       AVX-512 without VNNI (Skylake-SP): the same saturating pair sums, 512 bits wide
#   avx-vnni     VNNI on 256-bit registers (Alder Lake and later client cores): exact int32 dot products
#   avx512-vnni  AVX-512 VNNI (Cascade Lake, Ice Lake, AMD Zen 4/5): exact (vpdpbusd)
#   amx          AMX int8 tiles (Sapphire Rapids and later): exact
#   arm64 / arm64-dotprod / arm64-i8mm: NEON widening multiplies / sdot, udot / smmla: exact
#   x86-64       no AVX2 (SSE4 kernels: 16-bit widening, exact but slow)
ISA_CLASSES: tuple[str, ...] = (
    "avx2",
    "avx512",
    "avx-vnni",
    "avx512-vnni",
    "amx",
    "arm64",
    "arm64-dotprod",
    "arm64-i8mm",
    "x86-64",
)


def isa_class(arch: str, isa: tuple[str, ...] | list[str]) -> str:
    """The int8 arithmetic class (``ISA_CLASSES``) of a CPU with architecture ``arch`` and the
    ``ISA_FEATURES`` ``isa`` (as ``cpu_isa`` reads them); "unknown" for anything else."""
    have = set(isa)
    if arch == "x86_64":
        for flag, name in (
            ("amx_int8", "amx"),
            ("avx512_vnni", "avx512-vnni"),
            ("avx_vnni", "avx-vnni"),
            ("avx512f", "avx512"),
            ("avx2", "avx2"),
        ):
            if flag in have:
                return name
        return "x86-64"
    if arch == "aarch64":
        return "arm64-i8mm" if "i8mm" in have else "arm64-dotprod" if "asimddp" in have else "arm64"
    return "unknown"


def cpu_identity(root: str | Path = "/") -> dict[str, Any]:
    """``{"model", "cores", "board", "isa"}`` from /proc/cpuinfo and /proc/device-tree/model
    (None where absent; ``isa``: ``cpu_isa``, [] where unknown)."""
    model: str | None = None
    cores: int | None = None
    isa: list[str] = []
    try:
        text = under(root, "/proc/cpuinfo").read_text()
        isa = cpu_isa(text)
        cores = sum(1 for line in text.splitlines() if re.match(r"processor\s*:", line)) or None
        for key in ("model name", "Model", "Hardware", "cpu model"):
            m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
            if m:
                model = m.group(1).strip()
                break
    except OSError:
        pass
    board = None
    try:
        board = (
            under(root, "/proc/device-tree/model").read_text(encoding="utf-8", errors="replace").strip().rstrip("\x00")
            or None
        )
    except OSError:
        pass
    if cores is None and Path(root) == Path("/"):
        import os

        cores = os.cpu_count()
    return {"model": model, "cores": cores, "board": board, "isa": isa}


def parse_l4t(text: str) -> str | None:
    """``"# R35 (release), REVISION: 4.1, GCID: ..."`` -> ``"35.4.1"``; None if not recognised."""
    match = re.search(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*(\d+(?:\.\d+)*)", text)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def read_l4t(path: str | Path = L4T_RELEASE_PATH) -> str | None:
    """The L4T release of this Jetson (from ``/etc/nv_tegra_release``), None off-Jetson."""
    path = Path(path)
    if not path.is_file():
        return None
    release = parse_l4t(path.read_text(errors="replace"))
    if release is None:
        log.warning("cannot parse the L4T release from %s; engines will not be keyed to it", path)
    return release


def module_available(name: str) -> bool:
    """Whether ``import name`` would find a module, without importing it (a module set to None
    in ``sys.modules`` counts as missing, as ``import`` treats it)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    return importlib.util.find_spec(name) is not None


@dataclass(frozen=True)
class HostFacts:
    """What engines are tied to, read from this host (files only: no GPU library needed)."""

    arch: str  # x86_64 | aarch64 | ...
    cpu: str | None  # CPU model name
    board: str | None  # /proc/device-tree/model (Jetson, Raspberry Pi), None elsewhere
    l4t: str | None  # Jetson L4T release ("36.3.0"), None elsewhere
    nvidia_gpu: bool  # an NVIDIA driver (or Jetson's integrated GPU) is visible
    isa: tuple[str, ...] = ()  # int8/bf16 CPU features (ISA_FEATURES): OpenVINO CPU blobs are tied to them

    @property
    def isa_class(self) -> str:
        """This CPU's int8 arithmetic class (``ISA_CLASSES``; "unknown" when not read)."""
        return isa_class(self.arch, self.isa)

    @property
    def cpu_key(self) -> str:
        """The device key of an ORT model optimized for this very CPU."""
        return f"{self.arch}: {self.cpu or 'unknown CPU'}"

    @classmethod
    def detect(cls, root: str | Path = "/") -> HostFacts:
        machine = platform.machine().lower()
        cpu = cpu_identity(root)
        l4t = read_l4t(under(root, str(L4T_RELEASE_PATH)))
        gpus = under(root, "/proc/driver/nvidia/gpus")
        nvidia = l4t is not None or under(root, "/dev/nvidia0").exists() or (gpus.is_dir() and any(gpus.iterdir()))
        return cls(
            ARCH_ALIASES.get(machine, machine),
            cpu.get("model"),
            cpu.get("board"),
            l4t,
            nvidia,
            tuple(cpu.get("isa") or ()),
        )
