"""Fixtures of the check tests: tiny numpy runtimes (no ONNX) for the metric arithmetic, and
variants of the demo bundles (INT8 made here with onnxruntime.quantization, damaged copies) for
the stage. Quantized/damaged graphs are made once per session and copied per test."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from edgekit.runtimes.base import BaseRuntime
from edgekit.spec import TensorSpec


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "trained_weights: asserts the quality of the trained demo weights (fails with random-init ones)"
    )


# ---- tiny numpy runtimes: logits / velocity are simple known functions -------------------------
V, L, MASK = 6, 5, 6  # vocab, seq len, mask id (= V, outside the codebook)


class TableMasked(BaseRuntime):
    """tokens int64[B, L], class_id int64[B] -> logits float32[B, L, V] = E[tokens] + c·class_id."""

    name = "table-masked"

    def __init__(self, batch: int, table: np.ndarray, class_scale: float = 0.1):
        super().__init__(
            {"tokens": TensorSpec((batch, L), "int64"), "class_id": TensorSpec((batch,), "int64")},
            {"logits": TensorSpec((batch, L, V), "float32")},
        )
        self.table = table  # (V + 1, V): one row per token id incl. the mask
        self.class_scale = class_scale

    def _run_impl(self, feeds):
        logits = self.table[feeds["tokens"]] + self.class_scale * feeds["class_id"][:, None, None]
        return {"logits": logits.astype(np.float32)}


MASKED_META = {"vocab_size": V, "mask_id": MASK, "seq_len": L, "conditioning": {"class_id": {"uncond": 3}}}


def masked_table(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2.0, (V + 1, V))


class LinearFlow(BaseRuntime):
    """x float32[B, T, C], t float32[B] -> v = a·x + t (no conditioning)."""

    name = "linear-flow"

    def __init__(self, batch: int, a: float, frames: int = 4, channels: int = 3):
        super().__init__(
            {"x": TensorSpec((batch, frames, channels), "float32"), "t": TensorSpec((batch,), "float32")},
            {"v": TensorSpec((batch, frames, channels), "float32")},
        )
        self.a = a

    def _run_impl(self, feeds):
        return {"v": (self.a * feeds["x"] + feeds["t"][:, None, None]).astype(np.float32)}


FLOW_META = {"frames": 4, "channels": 3, "conditioning": {}}


class TableAR(BaseRuntime):
    """token int64[B,1], pos int64[1], caches [1,B,1,Lmax,1] -> logits E[token] + P[pos]; caches pass through."""

    name = "table-ar"

    def __init__(self, batch: int, table: np.ndarray, max_len: int = 5):
        cache = TensorSpec((1, batch, 1, max_len, 1), "float32")
        super().__init__(
            {
                "token": TensorSpec((batch, 1), "int64"),
                "pos": TensorSpec((1,), "int64"),
                "k_cache": cache,
                "v_cache": cache,
            },
            {"logits": TensorSpec((batch, V), "float32"), "k_cache_out": cache, "v_cache_out": cache},
        )
        self.table = table  # (V + 1, V): row V is the BOS token

    def _run_impl(self, feeds):
        logits = self.table[feeds["token"][:, 0]] + 0.3 * feeds["pos"][0]
        return {
            "logits": logits.astype(np.float32),
            "k_cache_out": feeds["k_cache"].copy(),
            "v_cache_out": feeds["v_cache"].copy(),
        }


AR_META = {"vocab_size": V, "max_len": 5, "bos_id": V, "conditioning": {}}


# ---- demo bundles and their variants ------------------------------------------------------------
def weighted_matmuls(model) -> list[str]:
    """MatMul nodes with a constant weight except the first and the last (input and output
    projections stay float, the usual practice): what a careful INT8 recipe quantizes. The
    attention core (activation x activation), Gemm GEMVs (time/AdaLN modulation) stay float."""
    inits = {i.name for i in model.graph.initializer}
    names = [n.name for n in model.graph.node if n.op_type == "MatMul" and any(x in inits for x in n.input)]
    return names[1:-1]


def calibration_feeds(bundle, batches: int = 2) -> list[dict[str, np.ndarray]]:
    """The fp32 network's inputs at every step of real decodes (the issue-4 recipe, in small)."""
    from edgekit.decode.dispatch import decode, decode_config
    from edgekit.evaluate import conditions
    from edgekit.evaluate.metrics import ShadowRecorder
    from edgekit.runtimes import open_runtime

    feeds: list[dict[str, np.ndarray]] = []

    class Keep(ShadowRecorder):
        def run(self, f):
            feeds.append({k: np.array(v) for k, v in f.items()})
            return self.inner.run(f)

    with open_runtime(bundle, "ort", "fp32") as rt:
        for i in range(batches):
            cond = conditions(bundle, {}, bundle.batch, 500 + i)
            cfg = decode_config(bundle.kind, bundle.manifest["decode_defaults"], {}, seed=500 + i)
            decode(bundle.kind, Keep(rt), bundle.meta, cond, cfg)
    return feeds


def _reader(feeds):
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    return Reader()


def quantize_careful(src: Path, dst: Path, bundle) -> None:
    """QDQ INT8 as a CPU profile would make it: u8 activations, per-channel symmetric s8 weights,
    ``weighted_matmuls`` only (LayerNorm, Softmax, the attention core stay float), calibrated on
    the inputs of real fp32 decode trajectories."""
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    model = onnx.load(str(src))
    quantize_static(
        model,
        dst,
        _reader(calibration_feeds(bundle)),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        nodes_to_quantize=weighted_matmuls(model),
        extra_options={"WeightSymmetric": True},
    )


def quantize_naive(src: Path, dst: Path, bundle) -> None:
    """The recipe users regret: every quantizable op (LayerNorm, Softmax, residual Adds, the
    attention core) per-tensor u8, calibrated on one forward pass (the first step's inputs):
    later steps' activations leave the calibrated ranges."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(
        str(src),
        dst,
        _reader(calibration_feeds(bundle, 1)[:1]),
        quant_format=QuantFormat.QDQ,
        per_channel=False,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QUInt8,
    )


def quantize_dynamic_all(src: Path, dst: Path, bundle) -> None:
    """quantize_dynamic on every MatMul (attention core included), per-tensor weights. Naive-looking,
    but activation ranges are computed per call: on the demo models it is the most accurate INT8."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), dst, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)


def perturb_weight(path: Path, scale: float, which: int | None = None) -> None:
    """Add Gaussian noise (``scale`` x the tensor's std) to one MatMul weight, in place: the
    'someone shipped a damaged model' regression. Works on fp32 and QDQ graphs (an int8 weight
    feeding a DequantizeLinear is perturbed in its integer domain)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    weights = [i for i in model.graph.initializer if len(i.dims) == 2 and min(i.dims) >= 16]
    w = weights[len(weights) // 2 if which is None else which]
    arr = numpy_helper.to_array(w)
    noise = scale * arr.astype(np.float64).std() * np.random.default_rng(0).standard_normal(arr.shape)
    if np.issubdtype(arr.dtype, np.integer):
        info = np.iinfo(arr.dtype)
        arr = np.clip(np.round(arr + noise), info.min, info.max).astype(arr.dtype)
    else:
        arr = (arr + noise).astype(arr.dtype)
    inits[w.name].CopyFrom(numpy_helper.from_array(arr, w.name))
    onnx.save(model, str(path))


@pytest.fixture(scope="session")
def int8_models(demo_bundles, tmp_path_factory) -> Callable[[str, str], Path]:
    """``get(kind, how)`` -> path of an int8 ONNX for the demo bundle of ``kind``, made once.
    how: careful | naive | dynamic_all | careful+perturb."""
    from edgekit.bundle import Bundle

    root = tmp_path_factory.mktemp("int8")
    made: dict[tuple[str, str], Path] = {}

    def get(kind: str, how: str) -> Path:
        if (kind, how) not in made:
            bundle = Bundle.load(demo_bundles[kind])
            src = bundle.path_of("fp32")
            dst = root / f"{kind}-{how}.onnx"
            if how == "careful+perturb":
                shutil.copy(get(kind, "careful"), dst)
                perturb_weight(dst, 3.0)
            else:
                {"careful": quantize_careful, "naive": quantize_naive, "dynamic_all": quantize_dynamic_all}[how](
                    src, dst, bundle
                )
            made[(kind, how)] = dst
        return made[(kind, how)]

    return get


@pytest.fixture
def bundle_with(demo_bundles, tmp_path) -> Callable[..., Path]:
    """``bundle_with(kind, int8=path or None, fp32_perturb=scale or None)`` -> a copy of the demo
    bundle of ``kind`` in tmp_path with that int8 artifact added (through the bundle API)."""
    from edgekit.bundle import Bundle

    def make(kind: str, int8: Path | None = None, fp32_perturb: float | None = None, name: str = "b") -> Path:
        root = tmp_path / f"{kind}-{name}"
        shutil.copytree(demo_bundles[kind], root)
        bundle = Bundle.load(root)
        if int8 is not None:
            staged = bundle.staging_path("int8.onnx")
            shutil.copy(int8, staged)
            bundle.add_artifact("int8", staged, made_by="test", config={"source": int8.name}, suffix=".onnx")
        if fp32_perturb is not None:
            staged = bundle.staging_path("int8.onnx")
            shutil.copy(bundle.path_of("fp32"), staged)
            perturb_weight(staged, fp32_perturb)
            bundle.add_artifact("int8", staged, made_by="test", config={"perturb": fp32_perturb}, suffix=".onnx")
        bundle.save()
        return root

    return make


@pytest.fixture
def fakes() -> SimpleNamespace:
    """The tiny numpy runtimes and their metadata (tests cannot import conftest)."""
    return SimpleNamespace(
        TableMasked=TableMasked,
        LinearFlow=LinearFlow,
        TableAR=TableAR,
        masked_table=masked_table,
        MASKED_META=MASKED_META,
        FLOW_META=FLOW_META,
        AR_META=AR_META,
        V=V,
        L=L,
        MASK=MASK,
    )
