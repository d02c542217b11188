"""Helpers shared by the build tests (conftest.py puts this folder on sys.path): tiny ONNX
models built in code, fake host facts, and a TensorRT host made of the recording fakes of the
tensorrt/cuda-python bindings (tests/fakes/trt_bindings.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.builder import HostFacts
from edgekit.bundle import Bundle
from edgekit.runtimes import trt as trt_backend
from edgekit.runtimes.trt import metadata as trt_metadata
from tests.fakes.trt_bindings import install

X86 = HostFacts("x86_64", "Test CPU 9000", None, None, False)
# What JetPacks really pair: 6.2 (L4T 36.4.3) ships TensorRT 10.3; 6.0 (L4T 36.3.0) ships 8.6.2.
ORIN_NANO = HostFacts("aarch64", "ARMv8 Processor rev 1 (v8l)", "NVIDIA Jetson Orin Nano Developer Kit", "36.4.3", True)
ORIN_TRT = trt_backend.HostMetadata("10.3.0", "Orin", "8.7", "36.4.3")
ORIN_NANO_JP60 = HostFacts(
    "aarch64", "ARMv8 Processor rev 1 (v8l)", "NVIDIA Jetson Orin Nano Developer Kit", "36.3.0", True
)
ORIN_TRT_JP60 = trt_backend.HostMetadata("8.6.2.3", "Orin", "8.7", "36.3.0")


def tiny_model(
    batch_dim: int | str = 2, qdq_zero_point: np.ndarray | None = None, scale: float = 1.0, reshape: bool = False
) -> onnx.ModelProto:
    """tokens int64[B,8] -> Gather(emb[16,4]) * scale -> MatMul(W[4,16]) -> logits float[B,8,16];
    with ``qdq_zero_point`` the MatMul input goes through a QuantizeLinear/DequantizeLinear pair;
    with ``reshape`` (batch 2) the MatMul is 2-D between two Reshapes, the pair after the first (as
    onnxruntime's QDQ pre-processing writes a MatMul)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "emb"),
        numpy_helper.from_array(rng.standard_normal((4, 16)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(scale, np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["h0"], name="embed"),
        helper.make_node("Mul", ["h0", "scale"], ["h"], name="scale"),
    ]
    head_in = "h"
    if reshape:
        inits += [
            numpy_helper.from_array(np.array([2 * 8, 4], np.int64), "shape2"),
            numpy_helper.from_array(np.array([2, 8, 16], np.int64), "shape3"),
        ]
        nodes.append(helper.make_node("Reshape", ["h", "shape2"], ["h2"], name="flatten"))
        head_in = "h2"
    if qdq_zero_point is not None:
        inits += [
            numpy_helper.from_array(np.array(0.05, np.float32), "s"),
            numpy_helper.from_array(qdq_zero_point, "zp"),
        ]
        nodes += [
            helper.make_node("QuantizeLinear", [head_in, "s", "zp"], ["hq"], name="q"),
            helper.make_node("DequantizeLinear", ["hq", "s", "zp"], ["hdq"], name="dq"),
        ]
        head_in = "hdq"
    if reshape:
        nodes += [
            helper.make_node("MatMul", [head_in, "w"], ["logits2"], name="head"),
            helper.make_node("Reshape", ["logits2", "shape3"], ["logits"], name="unflatten"),
        ]
    else:
        nodes.append(helper.make_node("MatMul", [head_in, "w"], ["logits"], name="head"))
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [batch_dim, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch_dim, 8, 16])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def add_model(bundle: Bundle, name: str, model: onnx.ModelProto, config: dict | None = None) -> None:
    staged = bundle.staging_path(f"{name}.onnx")
    onnx.save(model, str(staged))
    bundle.add_artifact(name, staged, made_by="test", config=config or {}, suffix=".onnx")


class FakeTrt:
    """A TensorRT host without TensorRT: the recording fake ``tensorrt`` of ``host``'s version
    builds real (fake) plans through the real ``build_engine``; ``host_metadata`` answers with
    ``host`` (its L4T and GPU); ``builds`` records every build's (source ONNX, config)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, host: trt_backend.HostMetadata = ORIN_TRT):
        self.host = host
        self.monkeypatch = monkeypatch
        self.builds: list[tuple[Path, trt_backend.TrtBuildConfig]] = []
        self.bindings = install(monkeypatch, host.tensorrt_version)
        real_build = trt_backend.build_engine

        def recording_build(onnx_path, plan_path, cfg=trt_backend.TrtBuildConfig(), **kwargs):
            self.builds.append((Path(onnx_path), cfg))
            return real_build(onnx_path, plan_path, cfg, **kwargs)

        # The stages ask the package; build_engine and load_engine ask its metadata module.
        monkeypatch.setattr(trt_backend, "host_metadata", lambda *a, **k: self.host)
        monkeypatch.setattr(trt_metadata, "host_metadata", lambda *a, **k: self.host)
        monkeypatch.setattr(trt_backend, "build_engine", recording_build)

    def upgrade(self, version: str) -> None:
        """The host's TensorRT is now ``version`` (a JetPack or pip upgrade)."""
        self.host = dataclasses.replace(self.host, tensorrt_version=version)
        self.bindings = install(self.monkeypatch, version)
