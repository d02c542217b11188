"""The AR step's two cache forms (edgekit.spec.AR_CACHE_IO) decode the same tokens: the "loop"
form (attention-mask input, only the new K/V out, the loop writes the cache: the NPU form) and the
"graph" form (the graph writes slot pos), the same weights exported both ways and run on ORT."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from edgekit.decode import ARDecodeConfig, decode_ar  # noqa: E402
from edgekit.errors import EdgekitError  # noqa: E402
from edgekit.runtimes.ort import OrtRuntime  # noqa: E402
from edgekit.spec import ModelSpec, TensorSpec, ar_cache_form, kind_io  # noqa: E402
from tests.tiny_models import tiny_ar_spec  # noqa: E402


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    """{form: (bundle, runtime)}: tiny AR (batch 2) exported in each cache form, verified."""
    import torch

    from edgekit.export.to_bundle import export_bundle

    root = tmp_path_factory.mktemp("ar-forms")
    out = {}
    for form in ("graph", "loop"):
        with torch.random.fork_rng():
            torch.manual_seed(0)  # the same weights in both forms
            spec = tiny_ar_spec(batch=2, cache=form)
        b = export_bundle(spec, root / form, source="tiny-ar")
        out[form] = (b, OrtRuntime(b.path_of("fp32")))
    yield out
    for _, rt in out.values():
        rt.close()


@pytest.mark.parametrize(
    "cfg",
    [
        ARDecodeConfig(),
        ARDecodeConfig(temperature=1.0, top_k=4, seed=3),
        ARDecodeConfig(guidance=2.0, seed=1),
        ARDecodeConfig(length=5),
    ],
)
def test_both_cache_forms_decode_the_same_tokens(forms, cfg):
    # With guidance the batch-2 graph takes two calls per step (conditional rows, then unconditional).
    cond = {"class_id": np.array([0, 2], np.int64)}
    results = {form: decode_ar(rt, b.meta, cond, cfg) for form, (b, rt) in forms.items()}
    np.testing.assert_array_equal(results["loop"].tokens, results["graph"].tokens)
    assert results["loop"].nfe == results["graph"].nfe


def test_the_loop_form_is_recognised_by_its_outputs(forms):
    b, rt = forms["loop"]
    assert ar_cache_form(rt.outputs) == "loop" and ar_cache_form(forms["graph"][1].outputs) == "graph"
    assert "attn_mask" in rt.inputs and rt.outputs["k_new"].shape[3] == 1
    assert kind_io("ar", rt.outputs)[0][-1] == "attn_mask"


def test_a_loop_form_spec_without_its_mask_input_is_refused():
    spec = tiny_ar_spec(batch=1, cache="loop")
    inputs = {k: v for k, v in spec.inputs.items() if k != "attn_mask"}
    with pytest.raises(EdgekitError, match="attn_mask"):
        ModelSpec(name="x", kind="ar", module=spec.module, inputs=inputs, outputs=spec.outputs, meta=spec.meta)
    assert isinstance(spec.inputs["attn_mask"], TensorSpec)


def test_the_loop_form_graph_takes_quantizations_pre_processing(forms, tmp_path):
    """quant_pre_process (symbolic shape inference) must type every tensor of the loop form:
    a ReduceMax in its attention once made it fail, and INT8 then ran without fused MatMul+Add."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    b, _ = forms["loop"]
    quant_pre_process(str(b.path_of("fp32")), str(tmp_path / "pre.onnx"))
    assert (tmp_path / "pre.onnx").stat().st_size > 0
