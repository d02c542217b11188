"""What a target file holds: one frozen ``Target`` with a section per runtime (``OrtSettings``,
``TrtSettings``, ``OpenVinoSettings``, ``qnn.QnnSettings``, ``aihub.AihubSettings``) and its lint
rules, each field commented with what it means, and the values a field may take. ``parse``
reads a file into them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edgekit.output import jsonable
from edgekit.targets.aihub import AihubSettings
from edgekit.targets.qnn import QnnSettings
from edgekit.targets.quantization import QUANTIZATION_PROFILES, ProfileFacts

# The power probes a target may name (edgekit.probes.power implements each one).
POWER_PROBES: tuple[str, ...] = ("off", "auto", "nvml", "jetson", "tegrastats", "rapl", "android", "odpm", "rpi")
ARCHES: tuple[str, ...] = ("host", "x86_64", "aarch64")
ORT_FORMATS: tuple[str, ...] = ("onnx", "ort")
ORT_OPTIMIZATION_STYLES: tuple[str, ...] = ("runtime", "fixed")
SUPPORTED_OPS_SOURCES: tuple[str, ...] = ("ort", "tensorrt", "nnapi", "coreml", "openvino", "qnn")
# OpenVINO's settings, as a target names them and the runtime (edgekit.runtimes.openvino) takes
# them: devices, its own spellings of ov::hint::PerformanceMode, and ov::hint::inference_precision
# ("default" leaves the device's choice, bf16 on CPUs that have it, f16 on GPU/NPU, and reports it).
OPENVINO_DEVICES: tuple[str, ...] = ("CPU", "GPU", "NPU")
OPENVINO_HINTS: tuple[str, ...] = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
OPENVINO_PRECISIONS: tuple[str, ...] = ("f32", "bf16", "f16", "default")
# ORT's graph optimization levels by edgekit name (same names as edgekit.runtimes.ort.OrtOptions).
GRAPH_OPTIMIZATIONS: tuple[str, ...] = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class OrtSettings:
    # Priority order: ORT gives each node to the first provider that supports it.
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    # One table per provider, same order ({} = that provider's defaults); empty = all defaults.
    provider_options: tuple[Mapping[str, Any], ...] = ()
    # Level `edgekit build` bakes into the saved model. "all" adds layout transforms tuned to the
    # build machine's vector width (NCHWc), so only the host target uses it; cross-device targets
    # use "extended", whose fusions run on any CPU, and the device applies the rest at load.
    graph_optimization: str = "extended"
    # "onnx": an optimized .onnx; "ort": ORT's flatbuffer format for mobile/minimal builds, with
    # the required-operators config that a minimal ORT build is compiled from.
    format: str = "onnx"
    # .ort only: "runtime" applies basic optimizations and saves the rest to replay at load (what
    # ORT recommends when NNAPI/CoreML/QNN may take an unknown set of nodes); "fixed" bakes all.
    optimization_style: str = "runtime"


@dataclass(frozen=True)
class TrtSettings:
    # Builder scratch memory (MiB) for tactic selection; Jetsons share it with the CPU.
    workspace_mib: int = 1024
    # 0..5; -1 = TensorRT's default (3). Higher searches more tactics, builds slower.
    builder_optimization_level: int = -1
    # Engines for this target are built and run on a Jetson (L4T present): refuse elsewhere.
    jetson: bool = False
    # Compute capabilities the target's GPU has (e.g. "8.7"); empty = any NVIDIA GPU.
    compute_capability: tuple[str, ...] = ()
    # Substrings of /proc/device-tree/model naming the board (e.g. "Orin Nano"); empty = any.
    # Orin Nano and AGX Orin share compute capability 8.7, so only the board tells them apart.
    board: tuple[str, ...] = ()
    # Jetson: the JetPack release(s) the target is for ("6.1, 6.2"). One target per JetPack
    # where the TensorRT differs: an engine runs only on the TensorRT that built it, and 8.x
    # (JetPack 5, 6.0) parses older opsets and narrows INT64 IO.
    jetpack: str = ""
    # L4T releases the device must run, as prefixes of /etc/nv_tegra_release's "R36 ... 4.3"
    # -> "36.4.3" (e.g. ["36.4"]); empty = any.
    l4t: tuple[str, ...] = ()
    # What that JetPack ships (major.minor): TensorRT, CUDA, and the system Python its TensorRT
    # bindings are built for. "" = not fixed (an x86 host has what pip installed).
    tensorrt: str = ""
    cuda: str = ""
    python: str = ""

    def l4t_matches(self, l4t: str | None) -> bool:
        """Whether a Jetson running L4T ``l4t`` ("36.4.3") is this target's JetPack."""
        if not self.l4t:
            return True
        return l4t is not None and any(l4t == p or l4t.startswith(p + ".") for p in self.l4t)


@dataclass(frozen=True)
class OpenVinoSettings:
    """What OpenVINO compiles a model with; ``runtimes.openvino.OvOptions`` derives from it."""

    # OpenVINO device: CPU (Core/Xeon/Atom), GPU (Arc, integrated), NPU (Core Ultra).
    device: str = "CPU"
    # INFERENCE_NUM_THREADS; 0 = the plugin's choice (one per physical core for LATENCY; `--threads N`
    # overrides a target's).
    threads: int = 0
    # NUM_STREAMS (parallel inference streams); 0 = what the performance hint picks (1 for LATENCY).
    streams: int = 0
    # LATENCY for decode loops (one request at a time); THROUGHPUT for many concurrent ones.
    performance_hint: str = "LATENCY"
    # Inference precision of the int8 model's float parts (LayerNorm, softmax, attention core):
    # f32, bf16, f16, or "default" = the device's choice (bf16 on AMX CPUs, f16 on GPU/NPU).
    # The fp32 precision always runs f32, bf16 bf16, fp16 f16.
    inference_precision: str = "f32"


@dataclass(frozen=True)
class LintRules:
    # Every graph input/output dim fixed, no op whose output shape depends on data.
    static_shapes: bool = True
    # Largest TopK K the runtime accepts (TensorRT: 3839, it requires K < 3840); 0 = no limit.
    max_topk_k: int = 0
    # Memory an app may use for the model on this device (MB); 0 = unknown, not checked.
    memory_budget_mb: int = 0
    # Default-domain opset range the target's runtime reads.
    opset_min: int = 7
    opset_max: int = 21
    # Where op support comes from: "ort" (the CPU EP runs every standard op), "tensorrt"
    # (edgekit's copy of the ONNX-TensorRT support matrix), "nnapi"/"coreml" (onnxruntime's
    # mobile usability checker), "qnn" (compiling for the HTP with CPU fallback off).
    supported_ops: str = "ort"


@dataclass(frozen=True)
class Target:
    # Name used on the command line (`--target NAME`) and in engine keys (engines/<name>/).
    name: str
    # Runtimes to try in order: the first this host can run is used (ort | trt | qnn).
    runtimes: tuple[str, ...]
    # Precisions the target runs, preferred first (fp32 | fp16 | int8).
    precisions: tuple[str, ...]
    # One line for `edgekit targets`.
    description: str = ""
    # CPU architecture of the device; "host" = whatever runs edgekit (the default target).
    arch: str = "host"
    # The `edgekit quantize --profile` its INT8 model must come from (cpu | trt | qnn).
    quantization_profile: str = "cpu"
    # The CPU's int8 arithmetic class (edgekit.host.ISA_CLASSES: avx2, avx512-vnni, amx, arm64-dotprod,
    # ...): the cpu profile picks its scheme by it (arithmetic.py), lint checks an int8
    # model against it. "host" = the machine edgekit runs on (the local targets).
    isa: str = "host"
    # Power probe name as `edgekit profile --power` takes it (auto, nvml, jetson, android, rpi, …).
    power_probe: str = "auto"
    # Jetson power modes: log `nvpmodel -q` with every measurement.
    nvpmodel: bool = False
    # The exact line that installs edgekit on the device (printed when deploy finds none there).
    install: str = "python3 -m pip install edgekit"
    ort: OrtSettings = field(default_factory=OrtSettings)
    trt: TrtSettings = field(default_factory=TrtSettings)
    openvino: OpenVinoSettings = field(default_factory=OpenVinoSettings)
    qnn: QnnSettings = field(default_factory=QnnSettings)
    aihub: AihubSettings = field(default_factory=AihubSettings)
    lint: LintRules = field(default_factory=LintRules)
    # Where it was loaded from ("builtin:cpu" or a file path): for messages, not from the file.
    source: str = ""

    @property
    def profile_facts(self) -> ProfileFacts:
        """What its quantization profile means to lint and build (``QUANTIZATION_PROFILES``)."""
        return QUANTIZATION_PROFILES[self.quantization_profile]

    @property
    def uses_trt(self) -> bool:
        return "trt" in self.runtimes

    @property
    def uses_openvino(self) -> bool:
        return "openvino" in self.runtimes

    @property
    def uses_qnn(self) -> bool:
        return "qnn" in self.runtimes

    def to_json(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self))
