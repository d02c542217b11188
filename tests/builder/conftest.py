"""Bundles for the build tests: the masked demo (exported once per session, copied per test)
and tiny bundles built in code; a fake TensorRT host for the engine logic."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # build_helpers, shared with the tests

from build_helpers import FakeTrt, add_model, tiny_model  # noqa: E402

from edgekit.bundle import Bundle  # noqa: E402
from edgekit.spec import TensorSpec  # noqa: E402


@pytest.fixture
def tiny_bundle(tmp_path) -> Callable[..., Bundle]:
    """``tiny_bundle(fp32_model=None, int8_model=None, profile=None)`` -> a saved bundle (batch 2)."""

    def make(
        fp32: onnx.ModelProto | None = None,
        int8: onnx.ModelProto | None = None,
        profile: str | None = None,
        name: str = "tiny",
    ) -> Bundle:
        bundle = Bundle.new(
            tmp_path / name,
            model={
                "name": "tiny",
                "kind": "masked",
                "meta": {"vocab_size": 16, "mask_id": 15, "seq_len": 8, "conditioning": {}},
            },
            inputs={"tokens": TensorSpec((2, 8), "int64", 0, 16)},
            outputs={"logits": TensorSpec((2, 8, 16), "float32")},
            decode_defaults={},
        )
        add_model(bundle, "fp32", fp32 or tiny_model())
        if int8 is not None:
            add_model(bundle, "int8", int8, {"profile": profile} if profile else {})
            bundle.manifest["quantization"] = {"profile": profile} if profile else None
        bundle.save()
        return Bundle.load(bundle.root)

    return make


@pytest.fixture
def fake_trt(monkeypatch) -> FakeTrt:
    return FakeTrt(monkeypatch)


@pytest.fixture
def ov_route_times(monkeypatch) -> Callable[[dict[str, float]], None]:
    """``ov_route_times({"onnx": 2.0, "ir": 1.0})``: an OpenVINO build's route timing answers
    these ms per forward (5 samples each; a route not named takes 10 ms) instead of timing the
    routes, so which route ships follows from the stand-in times and the budget, never a clock."""
    from edgekit.builder import openvino_routes

    def use(times: dict[str, float]) -> None:
        def stand_in(runtimes, feeds, **kwargs):
            return {name: [float(times.get(name, 10.0))] * 5 for name in runtimes}

        monkeypatch.setattr(openvino_routes, "measure_routes", stand_in)

    return use
