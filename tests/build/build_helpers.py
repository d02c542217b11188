"""Helpers shared by the build tests (conftest.py puts this folder on sys.path): tiny ONNX
models built in code, fake host facts, and a fake TensorRT host for the engine logic."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.build import HostFacts
from edgekit.bundle import Bundle
from edgekit.runtimes import trt as trt_backend

X86 = HostFacts("x86_64", "Test CPU 9000", None, None, False)
ORIN_NANO = HostFacts("aarch64", "ARMv8 Processor rev 1 (v8l)", "NVIDIA Jetson Orin Nano Developer Kit", "36.3.0", True)
ORIN_TRT = trt_backend.HostMetadata("10.3.0", "Orin", "8.7", "36.3.0")


def tiny_model(batch_dim: int | str = 2, qdq_zero_point: np.ndarray | None = None, scale: float = 1.0) -> onnx.ModelProto:
    """tokens int64[B,8] -> Gather(emb[16,4]) * scale -> MatMul(W[4,16]) -> logits float[B,8,16];
    with ``qdq_zero_point`` the MatMul input goes through a QuantizeLinear/DequantizeLinear pair."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "emb"),
        numpy_helper.from_array(rng.standard_normal((4, 16)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(scale, np.float32), "scale"),
    ]
    nodes = [helper.make_node("Gather", ["emb", "tokens"], ["h0"], name="embed"), helper.make_node("Mul", ["h0", "scale"], ["h"], name="scale")]
    head_in = "h"
    if qdq_zero_point is not None:
        inits += [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(qdq_zero_point, "zp")]
        nodes += [helper.make_node("QuantizeLinear", ["h", "s", "zp"], ["hq"], name="q"),
                  helper.make_node("DequantizeLinear", ["hq", "s", "zp"], ["hdq"], name="dq")]
        head_in = "hdq"
    nodes.append(helper.make_node("MatMul", [head_in, "w"], ["logits"], name="head"))
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("tokens", TensorProto.INT64, [batch_dim, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch_dim, 8, 16])], initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def add_model(bundle: Bundle, name: str, model: onnx.ModelProto, config: dict | None = None) -> None:
    staged = bundle.staging_path(f"{name}.onnx")
    onnx.save(model, str(staged))
    bundle.add_artifact(name, staged, made_by="test", config=config or {}, suffix=".onnx")


class FakeTrt:
    """What edgekit.runtimes.trt needs from a GPU host, without TensorRT: ``host_metadata``
    answers with ``host`` and ``build_engine`` writes a placeholder plan and its real sidecar."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, host: trt_backend.HostMetadata = ORIN_TRT):
        self.host = host
        self.builds: list[tuple[Path, trt_backend.TrtBuildConfig]] = []
        monkeypatch.setitem(sys.modules, "tensorrt", types.SimpleNamespace(__version__=host.tensorrt_version))
        monkeypatch.setattr(trt_backend, "host_metadata", lambda *a, **k: self.host)
        monkeypatch.setattr(trt_backend, "build_engine", self.build_engine)

    def build_engine(self, onnx_path, plan_path, cfg, **_):
        onnx_path, plan_path = Path(onnx_path), Path(plan_path)
        self.builds.append((onnx_path, cfg))
        plan_path.write_bytes(b"plan for " + onnx_path.read_bytes()[:64] + cfg.precision.encode() + self.host.tensorrt_version.encode())
        meta = trt_backend.EngineMetadata(
            self.host.tensorrt_version, self.host.gpu_name, self.host.compute_capability, self.host.l4t,
            trt_backend.sha256_file(onnx_path), cfg.precision, "2026-01-01T00:00:00+00:00", "test",
        )
        trt_backend.write_metadata(plan_path, meta)
        return meta
