"""Tiny hand-built ONNX bundles (no torch, no export: milliseconds per decode) and one profile
document shared by the tests of this directory.

masked: tokens int64[B, L] -> logits float32[B, L, V] (embedding lookup + a V x V MatMul so the
runtime has work to do); ar: token int64[B, 1], pos, k/v caches -> logits [B, V], caches passed
through. The ``source`` names the built-in architectures so the length sweep can rebuild them.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from edgekit.bundle import Bundle
from edgekit.probes.latency import MeasureConfig
from edgekit.probes.power import PowerSampler, Reading
from edgekit.spec import TensorSpec

B, L, V = 2, 16, 32
DEPTH, HEADS, HD = 1, 2, 4
FAST = MeasureConfig(warmup_iters=1, warmup_seconds=0.0, iters=6, min_seconds=0.05)
POWER_MW = 5000.0
IDLE_MW = 2000.0


class ConstantSampler(PowerSampler):
    """A power sensor that reads 2 W on its total rail in its first window (the idle baseline,
    which the profile takes first) and 5 W in every later one (the decodes)."""

    probe = "fake"
    default_interval_s = 0.01

    def __init__(self) -> None:
        super().__init__()
        self.windows = 0

    def start(self) -> None:
        self.windows += 1
        super().start()

    def read(self) -> Reading:
        return Reading(rails_mw={"total": IDLE_MW if self.windows == 1 else POWER_MW})


def _save(graph, path: Path) -> None:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _masked_graph(scale: float):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    emb = numpy_helper.from_array((scale * rng.standard_normal((V + 1, V))).astype(np.float32), "emb")
    mix = numpy_helper.from_array(rng.standard_normal((V, V)).astype(np.float32), "mix")
    nodes = [helper.make_node("Gather", ["emb", "tokens"], ["h"]), helper.make_node("MatMul", ["h", "mix"], ["logits"])]
    return helper.make_graph(
        nodes,
        "tiny_masked",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [B, L])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, L, V])],
        [emb, mix],
    )


def _ar_graph(max_len: int):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    emb = numpy_helper.from_array(rng.standard_normal((V + 1, V)).astype(np.float32), "emb")
    cache = [DEPTH, B, HEADS, max_len, HD]
    nodes = [
        helper.make_node("Gather", ["emb", "token"], ["h"]),  # [B, 1, V]
        helper.make_node("Squeeze", ["h", "one"], ["logits"]),
        helper.make_node("Identity", ["k_cache"], ["k_cache_out"]),
        helper.make_node("Identity", ["v_cache"], ["v_cache_out"]),
    ]
    return helper.make_graph(
        nodes,
        "tiny_ar",
        [
            helper.make_tensor_value_info("token", TensorProto.INT64, [B, 1]),
            helper.make_tensor_value_info("pos", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("k_cache", TensorProto.FLOAT, cache),
            helper.make_tensor_value_info("v_cache", TensorProto.FLOAT, cache),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, V]),
            helper.make_tensor_value_info("k_cache_out", TensorProto.FLOAT, cache),
            helper.make_tensor_value_info("v_cache_out", TensorProto.FLOAT, cache),
        ],
        [emb, numpy_helper.from_array(np.array([1], dtype=np.int64), "one")],
    )


def make_masked_bundle(root: Path, *, int8: bool = False, source: str = "masked-demo", fp32_scale: float = 1.0) -> Path:
    """``fp32_scale`` scales the logits: 0.01 makes every decision a near-tie (a model that barely decides)."""
    bundle = Bundle.new(
        root,
        model={
            "name": "tiny-masked",
            "kind": "masked",
            "source": source,
            "ground_truth": None,
            "meta": {"vocab_size": V, "mask_id": V, "seq_len": L, "conditioning": {}},
        },
        inputs={"tokens": TensorSpec((B, L), "int64", 0, V + 1)},
        outputs={"logits": TensorSpec((B, L, V), "float32")},
        decode_defaults={"steps": 4, "schedule": "cosine", "choice_temperature": 4.5, "temperature": 1.0},
    )
    for name, scale in (("fp32", fp32_scale),) + ((("int8", 0.5),) if int8 else ()):
        # The "int8" artifact is a second float graph: the profiler treats precisions as artifacts.
        staged = bundle.staging_path(f"{name}.onnx")
        _save(_masked_graph(scale), staged)
        bundle.add_artifact(name, staged, made_by="test", config={}, suffix=".onnx")
    bundle.save()
    return bundle.root


def make_ar_bundle(root: Path, *, max_len: int = L, source: str = "ar-demo") -> Path:
    cache = TensorSpec((DEPTH, B, HEADS, max_len, HD), "float32", -1.0, 1.0)
    bundle = Bundle.new(
        root,
        model={
            "name": "tiny-ar",
            "kind": "ar",
            "source": source,
            "ground_truth": None,
            "meta": {"vocab_size": V, "max_len": max_len, "bos_id": V, "conditioning": {}},
        },
        inputs={
            "token": TensorSpec((B, 1), "int64", 0, V + 1),
            "pos": TensorSpec((1,), "int64", 0, max_len),
            "k_cache": cache,
            "v_cache": cache,
        },
        outputs={"logits": TensorSpec((B, V), "float32"), "k_cache_out": cache, "v_cache_out": cache},
        decode_defaults={"temperature": 1.0, "top_k": 0},
    )
    staged = bundle.staging_path("fp32.onnx")
    _save(_ar_graph(max_len), staged)
    bundle.add_artifact("fp32", staged, made_by="test", config={}, suffix=".onnx")
    bundle.save()
    return bundle.root


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The builders and sizes, for tests that make their own bundles."""
    return SimpleNamespace(
        B=B, L=L, V=V, FAST=FAST, POWER_MW=POWER_MW, IDLE_MW=IDLE_MW, masked=make_masked_bundle, ar=make_ar_bundle
    )


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """{"masked": fp32 only, "masked8": fp32 + int8, "ar": sibling of both} under one demo-like root."""
    root = tmp_path_factory.mktemp("tiny")
    return {
        "masked": make_masked_bundle(root / "masked"),
        "masked8": make_masked_bundle(root / "masked8", int8=True),
        "ar": make_ar_bundle(root / "ar"),
    }


@pytest.fixture(scope="session")
def profile_doc(tiny) -> dict:
    """One profile of the fp32+int8 bundle against its AR sibling, with no sweep and no power."""
    from edgekit.profile import ProfileConfig, profile_bundle

    cfg = ProfileConfig(measure=FAST, power="off", compare_ar=True, ar_bundle=tiny["ar"], sweep_lengths=())
    return profile_bundle(tiny["masked8"], cfg)


@pytest.fixture(scope="session")
def power_doc(tiny) -> dict:
    """A profile of the fp32 bundle with a stand-in sensor (2 W idle, 5 W decoding) in place of the
    platform's."""
    from edgekit.profile import ProfileConfig, profile_bundle

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("edgekit.profile.measure.detect", lambda choice, root: ConstantSampler())
        return profile_bundle(tiny["masked"], ProfileConfig(measure=FAST, power="auto", idle_seconds=0.1))
