"""How edgekit makes a session on Qualcomm's HTP backend (``onnxruntime-qnn``): ``QnnOptions``
(the SoC a graph is compiled for, fp16, CPU fallback) and the QNN EP's provider options they
make, the plugin EP registered once per process, the session with the native log captured and a
refusal said in one line naming the node (``QnnCompileError``), and the EPContext model: the
compiled QNN context binary in a one-node ONNX file that a device loads without compiling
(``compile_context``). ``qnn.QnnRuntime`` and ``builder/qnn.py`` use it."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.bundle import sha256_file
from edgekit.errors import EdgekitError, TargetUnavailable, UsageError, one_of
from edgekit.runtimes.qnn_nodes import float_nodes, refused_nodes
from edgekit.targets import QNN_PERFORMANCE_MODES as PERFORMANCE_MODES

EP_NAME = "QNNExecutionProvider"
# Hexagon generations with float16 HTP arithmetic (enable_htp_fp16_precision).
FP16_MIN_ARCH = 73
# With neither a target nor options: Snapdragon 8 Gen 3 (SM8650, HTP v75), the newest SoC the
# onnxruntime-qnn documentation's examples compile for; ``--target`` picks another.
DEFAULT_HTP_ARCH = 75
DEFAULT_SOC_MODEL = 57


@dataclass(frozen=True)
class QnnOptions:
    # Hexagon architecture the graph is compiled for (73 = v73, 75, 79, 81); 0 = the default SoC's.
    htp_arch: int = 0
    # QNN SoC model id (43 = SM8550 8 Gen 2, 57 = SM8650 8 Gen 3, 69 = SM8750 8 Elite, 60 =
    # SC8380XP X Elite); 0 = the default SoC's. Together with htp_arch it fixes the context binary.
    soc_model: int = 0
    performance_mode: str = "burst"  # htp_performance_mode: clocks/voltage vote on a device
    vtcm_mb: int = 0  # VTCM (the NPU's tightly coupled memory) to reserve; 0 = the backend's default
    fp16: bool = False  # run float ops in float16 on the HTP (v73+) instead of requiring QDQ
    # Let ORT run the nodes the NPU refuses on the CPU. Off: such a node is an error (deployment
    # must not find out on the phone that half the graph ran on the CPU).
    cpu_fallback: bool = False
    io_binding: bool = True

    def __post_init__(self) -> None:
        one_of("htp_performance_mode", self.performance_mode, PERFORMANCE_MODES)
        for key in ("htp_arch", "soc_model", "vtcm_mb"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 0:
                raise UsageError(f"qnn {key} must be an int >= 0 (0 = default), got {value!r}")
        if self.fp16 and self.arch < FP16_MIN_ARCH:
            raise UsageError(
                f"fp16 on the HTP needs htp_arch >= {FP16_MIN_ARCH}; this target is v{self.arch}",
                hint="use int8 (edgekit quantize --profile qnn) for this SoC",
            )

    @property
    def arch(self) -> int:
        return self.htp_arch or DEFAULT_HTP_ARCH

    @property
    def soc(self) -> int:
        return self.soc_model or (DEFAULT_SOC_MODEL if not self.htp_arch else 0)

    def provider_options(self) -> dict[str, str]:
        """The QNN EP's provider options (all strings, as the EP reads them)."""
        qnn = require("onnxruntime_qnn")
        opts = {
            "backend_path": qnn.get_qnn_htp_path(),
            "htp_performance_mode": self.performance_mode,
            "htp_arch": str(self.arch),
        }
        if self.soc:
            opts["soc_model"] = str(self.soc)
        if self.vtcm_mb:
            opts["vtcm_mb"] = str(self.vtcm_mb)
        if self.fp16:
            opts["enable_htp_fp16_precision"] = "1"
        return opts


def emulated() -> bool:
    """True where the HTP backend emulates the NPU (any non-ARM host): latency is not the device's."""
    return platform.machine().lower() not in ("aarch64", "arm64")


def versions() -> dict[str, str]:
    """onnxruntime, onnxruntime-qnn and the QNN SDK version its libraries come from."""
    ort = require("onnxruntime")
    qnn = require("onnxruntime_qnn")
    info = getattr(qnn, "build_and_package_info", None)
    return {
        "onnxruntime": ort.__version__,
        "onnxruntime_qnn": getattr(qnn, "__version__", "unknown"),
        "qnn_sdk": str(getattr(info, "qnn_version", "unknown")),
    }


def register(ort: Any) -> list[Any]:
    """Register the QNN plugin EP library with onnxruntime once per process; its EP devices."""
    qnn = require("onnxruntime_qnn")
    if not hasattr(ort, "register_execution_provider_library"):
        raise TargetUnavailable(
            f"onnxruntime {ort.__version__} cannot load plugin execution providers (onnxruntime-qnn needs >= 1.24.2)",
            hint="pip install -U 'edgekit[qnn]'",
        )
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        with captured_native_output():
            ort.register_execution_provider_library(EP_NAME, qnn.get_library_path())
        devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise TargetUnavailable(
            "onnxruntime-qnn registered no QNN device on this host", hint="reinstall with pip install -U 'edgekit[qnn]'"
        )
    return devices


@contextlib.contextmanager
def captured_native_output() -> Iterator[list[str]]:
    """Send the process's stdout and stderr file descriptors to a temp file for the block (the
    QNN libraries print banners to stdout, which would corrupt ``--json``, and ORT logs refusals
    to stderr); the yielded list holds the text afterwards."""
    text: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield text
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            text.append(sink.read().decode("utf-8", "replace"))


def _refusal_message(
    model_path: Path, log: str, options: QnnOptions, exc: Exception
) -> tuple[str, str, list[dict[str, str]]]:
    """(message, hint, findings) for a session the HTP backend could not compile."""
    refused = refused_nodes(log)
    floats = [] if options.fp16 else float_nodes(model_path)
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    first_line = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", first_line)[:200]
    if refused:
        r = refused[0]
        more = f" and {len(refused) - 1} more" if len(refused) > 1 else ""
        ops = sorted({x["op"] for x in refused})
        message = (
            f"qnn: the HTP backend refused node {r['node']!r} ({r['op']}){more} of {model_path.name} "
            f"(refused ops: {', '.join(ops)})"
        )
        hint = (
            "quantize with `edgekit quantize BUNDLE --profile qnn` (every op QDQ, uint8/uint16 activations); "
            "`edgekit lint BUNDLE --target T` lists every node"
        )
        return message, hint, refused
    if floats:
        f = floats[0]
        more = f" and {len(floats) - 1} more" if len(floats) > 1 else ""
        message = (
            f"qnn: node {f['node']!r} ({f['op']}){more} of {model_path.name} computes in float32, which the HTP "
            f"cannot run ({first_line})"
        )
        hint = "quantize every op with `edgekit quantize BUNDLE --profile qnn`, or run --precision fp16 (HTP v73+)"
        return message, hint, floats
    return (
        f"qnn: the HTP backend could not compile {model_path.name}: {first_line}",
        "see `edgekit lint BUNDLE --target T`",
        [],
    )


# onnxruntime exception names a session that cannot be compiled for the HTP raises.
_SESSION_ERRORS = (
    "Fail",
    "EPFail",
    "InvalidGraph",
    "NotImplemented",
    "InvalidArgument",
    "RuntimeException",
    "InvalidProtobuf",
    "NoModel",
)


class QnnCompileError(TargetUnavailable):
    """The HTP backend refused the graph; ``findings`` lists the nodes and ops it refused,
    ``seconds`` how long the failed compile took (what decides whether lint bisects it)."""

    def __init__(self, message: str, hint: str, findings: list[dict[str, str]], seconds: float = 0.0):
        super().__init__(message, hint=hint)
        self.findings = findings
        self.seconds = seconds


def create_session(
    model: Path | bytes,
    options: QnnOptions,
    *,
    source: Path,
    context_out: Path | None = None,
    threads: int = 0,
    embed: bool = True,
) -> tuple[Any, float, str]:
    """(InferenceSession on the HTP backend, seconds to create it, the native log).

    context_out: also write an EPContext model there (``ep.context_enable``); the context binary
    embedded in it (``embed``), or beside it in ``<stem>_qnn.bin``, which the model names."""
    ort = require("onnxruntime")
    devices = register(ort)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 2  # warnings: the EP names each node it refuses at this level
    if not options.cpu_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if context_out is not None:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", str(context_out))
        so.add_session_config_entry("ep.context_embed_mode", "1" if embed else "0")
    so.add_provider_for_devices(devices, options.provider_options())
    state = ort.capi.onnxruntime_pybind11_state
    start = time.perf_counter()
    with captured_native_output() as log:
        try:
            session = ort.InferenceSession(model if isinstance(model, bytes) else str(model), so)
            error = None
        except tuple(getattr(state, n) for n in _SESSION_ERRORS if hasattr(state, n)) as exc:
            session, error = None, exc
    seconds = time.perf_counter() - start
    if error is not None:
        raise QnnCompileError(*_refusal_message(source, log[0], options, error), seconds=seconds) from None
    return session, seconds, log[0]


def is_context_model(path: Path) -> bool:
    onnx = require("onnx")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - the session loaded it; this is only a label
        return False
    return any(n.op_type == "EPContext" for n in model.graph.node)


def compile_context(model_path: Path, out_path: Path, options: QnnOptions, *, embed: bool = True) -> dict[str, Any]:
    """Compile ``model_path`` for ``options``' SoC and write the EPContext model to ``out_path``:
    the QNN context binary embedded in a one-node ONNX graph (``embed``), or, for a model whose
    weights need a side file (protobuf holds no 2 GB attribute), in a file beside it named
    ``ctx-<sha8>.bin`` that the graph names. Facts for the engine record (``context_file``: that
    file, or None)."""
    out_path.unlink(missing_ok=True)
    session, seconds, _ = create_session(model_path, options, source=model_path, context_out=out_path, embed=embed)
    del session
    if not out_path.is_file():
        raise EdgekitError(
            f"qnn: onnxruntime-qnn wrote no EPContext model to {out_path}",
            hint="check ep.context_* support of this onnxruntime-qnn",
        )
    return {"compile_seconds": seconds, "context_file": None if embed else _name_context_file(out_path)}


def _name_context_file(model_path: Path) -> Path:
    """Give the context binary an EPContext model names (``<stem>_qnn.bin``) its content-addressed
    name and point the graph at it: the engines of two precisions share ``engines/<target>/``."""
    onnx = require("onnx")
    model = onnx.load(str(model_path), load_external_data=False)  # the graph alone: the binary is beside it
    found = None
    for node in model.graph.node:
        for attr in node.attribute:
            if node.op_type == "EPContext" and attr.name == "ep_cache_context":
                current = model_path.parent / attr.s.decode()
                if found is None:
                    found = current.with_name(f"ctx-{sha256_file(current)[:8]}.bin")
                    os.replace(current, found)
                attr.s = found.name.encode()
    if found is None:
        raise EdgekitError(
            f"qnn: onnxruntime-qnn wrote no context binary beside {model_path.name}",
            hint="check ep.context_embed_mode support of this onnxruntime-qnn",
        )
    onnx.save_model(model, str(model_path))
    return found


def qnn_options_for(target: Any, precision: str) -> QnnOptions:
    """QnnOptions from a target's ``[qnn]`` table and the precision (fp16 -> HTP float16)."""
    q = target.qnn
    return QnnOptions(
        htp_arch=q.htp_arch,
        soc_model=q.soc_model,
        performance_mode=q.performance_mode,
        vtcm_mb=q.vtcm_mb,
        fp16=precision == "fp16",
    )
