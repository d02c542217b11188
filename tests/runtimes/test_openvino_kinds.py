"""The three model kinds and the fused graphs decoded on OpenVINO against ONNX Runtime, on tiny
torch models (random weights, exported once per module): the same loops, the same noise, the
same tokens/frames; the AR KV cache and the fused graphs' state ping-pong on OpenVINO's
double-buffered outputs; the QDQ INT8 model runs as int8."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("torch")

from edgekit.bundle import Bundle  # noqa: E402
from edgekit.decode.ar import ARDecodeConfig, decode_ar  # noqa: E402
from edgekit.decode.flow import FlowDecodeConfig, decode_flow  # noqa: E402
from edgekit.decode.fused import decode_flow_fused, decode_masked_fused  # noqa: E402
from edgekit.decode.masked import MaskedDecodeConfig, decode_masked  # noqa: E402
from edgekit.errors import UsageError  # noqa: E402
from edgekit.runtimes import open_fused, open_runtime  # noqa: E402
from tests.tiny_models import tiny_flow_spec, tiny_masked_spec  # noqa: E402

CLASSES = np.array([0, 2], dtype=np.int64)


def tiny_ar_spec(batch: int = 2, form: str = "graph"):
    import torch

    from edgekit.models.ar import ARConfig, CausalTransformer, ar_io, ar_step
    from edgekit.spec import ModelSpec

    torch.manual_seed(3)
    cfg = ARConfig(vocab_size=10, max_len=8, num_classes=3, dim=16, depth=2, heads=2, mlp_ratio=2)
    inputs, outputs = ar_io(cfg, batch, form)
    return ModelSpec(
        name="tiny-ar",
        kind="ar",
        module=ar_step(CausalTransformer(cfg), form),
        inputs=inputs,
        outputs=outputs,
        meta={
            "vocab_size": cfg.vocab_size,
            "max_len": cfg.max_len,
            "bos_id": cfg.bos_id,
            "conditioning": {"class_id": {"uncond": cfg.num_classes}},
        },
        decode_defaults={"temperature": 1.0, "top_k": 0},
    )


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    from edgekit.export.to_bundle import export_bundle

    root = tmp_path_factory.mktemp("ov-kinds")
    specs = {
        "masked": tiny_masked_spec(),
        "flow": tiny_flow_spec(),
        "ar": tiny_ar_spec(),
        "ar-layers": tiny_ar_spec(form="layers"),
    }
    return {kind: export_bundle(spec, root / kind, source=spec.name).root for kind, spec in specs.items()} | {
        "_specs": specs
    }


def _both(bundle: Bundle, precision: str = "fp32"):
    return open_runtime(bundle, "ort", precision, threads=1), open_runtime(bundle, "openvino", precision, threads=1)


def test_masked_host_loop_gives_the_same_tokens(bundles):
    bundle = Bundle.load(bundles["masked"])
    cfg = MaskedDecodeConfig(steps=6, seed=4)
    ort, ov = _both(bundle)
    with ort, ov:
        assert ov.name == "openvino" and ov.settings["inference_precision"] == "f32"
        want = decode_masked(ort, bundle.meta, {"class_id": CLASSES}, cfg).tokens
        got = decode_masked(ov, bundle.meta, {"class_id": CLASSES}, cfg).tokens
    assert len(np.unique(want)) > 1
    np.testing.assert_array_equal(got, want)


def test_flow_host_loop_gives_the_same_frames(bundles):
    bundle = Bundle.load(bundles["flow"])
    tokens = np.array([[1, 2, 3, 4], [5, 6, 7, 0]], dtype=np.int64)
    cfg = FlowDecodeConfig(steps=3, solver="heun", seed=2, guidance=2.0)
    ort, ov = _both(bundle)
    with ort, ov:
        want = decode_flow(ort, bundle.meta, {"tokens": tokens}, cfg).x
        got = decode_flow(ov, bundle.meta, {"tokens": tokens}, cfg).x
    assert np.abs(want).max() > 0.1
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_ar_kv_cache_ping_pongs_and_gives_the_same_tokens(bundles):
    bundle = Bundle.load(bundles["ar"])
    cfg = ARDecodeConfig(seed=5)
    ort, ov = _both(bundle)
    with ort, ov:
        wrapped = []
        real = ov._tensor
        ov._tensor = lambda array, **kw: (wrapped.append(array.shape), real(array, **kw))[1]
        got = decode_ar(ov, bundle.meta, {"class_id": CLASSES}, cfg)
        want = decode_ar(ort, bundle.meta, {"class_id": CLASSES}, cfg)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    cache = tuple(bundle.inputs["k_cache"].shape)
    # The loop-owned zero caches are wrapped on the first step only; every later step feeds the
    # previous step's cache outputs back as they are.
    assert wrapped.count(cache) == 2 and len(wrapped) == 2 + 3 * (got.tokens.shape[1] - 1) + 3


def test_ar_layers_form_reads_the_loops_cache_views_and_gives_the_same_tokens(bundles):
    """The "layers" cache form: each layer's slice of the loop's stacked cache is wrapped as it
    is (a view; OpenVINO shares its memory), the same tokens as ONNX Runtime with and without
    guidance (two calls per step at guidance 2: each call's rows of every layer's cache)."""
    bundle = Bundle.load(bundles["ar-layers"])
    ort, ov = _both(bundle)
    with ort, ov:
        for cfg in (ARDecodeConfig(seed=5), ARDecodeConfig(guidance=2.0, seed=1)):
            got = decode_ar(ov, bundle.meta, {"class_id": CLASSES}, cfg)
            want = decode_ar(ort, bundle.meta, {"class_id": CLASSES}, cfg)
            np.testing.assert_array_equal(got.tokens, want.tokens)


@pytest.mark.parametrize("graph", ["step", "unrolled"])
def test_fused_masked_graphs_give_the_host_loops_tokens(bundles, tmp_path, graph):
    import shutil

    from edgekit.export.fused import fused_bundle

    path = shutil.copytree(bundles["masked"], tmp_path / "masked")
    fused_bundle(path, graph, {"steps": 6}, spec=bundles["_specs"]["masked"])
    bundle = Bundle.load(path)
    cfg = MaskedDecodeConfig(steps=6, seed=7)
    rt, entry = open_fused(bundle, graph, threads=1, runtime="openvino")
    with rt, open_runtime(bundle, "ort", threads=1) as host:
        assert rt.name == "openvino"
        got = decode_masked_fused(rt, entry, {"class_id": CLASSES}, cfg)
        want = decode_masked(host, bundle.meta, {"class_id": CLASSES}, cfg).tokens
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("graph", ["step", "unrolled"])
def test_fused_flow_graphs_give_the_host_loops_frames(bundles, tmp_path, graph):
    import shutil

    from edgekit.export.fused import fused_bundle

    path = shutil.copytree(bundles["flow"], tmp_path / "flow")
    fused_bundle(path, graph, {"solver": "midpoint", "steps": 3}, spec=bundles["_specs"]["flow"])
    bundle = Bundle.load(path)
    tokens = np.array([[1, 2, 3, 4], [5, 6, 7, 0]], dtype=np.int64)
    cfg = FlowDecodeConfig(steps=3, solver="midpoint", seed=3)
    rt, entry = open_fused(bundle, graph, threads=1, runtime="openvino")
    with rt, open_runtime(bundle, "ort", threads=1) as host:
        got = decode_flow_fused(rt, entry, {"tokens": tokens}, cfg).x
        want = decode_flow(host, bundle.meta, {"tokens": tokens}, cfg).x
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_fused_graph_refuses_int8_and_other_runtimes(bundles, tmp_path):
    import shutil

    from edgekit.export.fused import fused_bundle

    path = shutil.copytree(bundles["flow"], tmp_path / "flow")
    fused_bundle(path, "step", spec=bundles["_specs"]["flow"])
    bundle = Bundle.load(path)
    for runtime, precision in (("openvino", "int8"), ("torch", "fp32")):
        with pytest.raises(UsageError, match="fused fp32 graph"):
            open_fused(bundle, "step", runtime=runtime, precision=precision)


def test_qdq_int8_runs_int8_kernels_close_to_ort_int8(bundles, tmp_path):
    """A QDQ INT8 model in the cpu profile's form (u8 activations, s8 per-channel weights bounded
    so no K pair passes 128: the scheme that is exact on every CPU class) on OpenVINO: int8 kernels
    run (not a float fallback), and the logits stay within a few quantization steps of ORT's on the
    same file and of FP32. (Plain full-range u8s8 from quantize_static saturates both runtimes'
    int8 kernels on an AVX2 host: 1.26 of a 2.45 logit spread, tests/quantize/test_arithmetic.py.)"""
    from edgekit.quantize import QuantizeConfig, quantize_unbudgeted
    from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions
    from edgekit.runtimes.ort import OrtRuntime

    bundle = Bundle.load(bundles["masked"])
    rng = np.random.default_rng(0)
    calib = [{"tokens": rng.integers(0, 17, (2, 12)), "class_id": rng.integers(0, 4, 2)} for _ in range(8)]
    int8 = quantize_unbudgeted(
        bundle.path_of("fp32"), tmp_path / "int8.onnx", calib, QuantizeConfig(scheme="u8s8-pair")
    )
    feeds = calib[0]
    with (
        OpenVinoRuntime(int8, OvOptions(threads=1, profiling=True)) as ov,
        OrtRuntime(int8) as ort,
        OrtRuntime(bundle.path_of("fp32")) as fp32,
    ):
        got = ov.run(feeds)["logits"]
        kernels = {r["kernel"] for r in ov.op_profile()}
        want = ort.run(feeds)["logits"]
        ref = fp32.run(feeds)["logits"]
    assert any("i8" in k.lower() or "u8" in k.lower() for k in kernels), kernels
    spread = np.abs(ref).max()
    assert np.abs(got - want).max() < 0.1 * spread  # both int8: close to each other
    assert np.abs(got - ref).max() < 0.25 * spread  # and to fp32
