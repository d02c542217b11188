"""Every AR cache form goes through quantize and check (``edgekit.spec.AR_CACHE_IO``): the
"layers" form edgekit exports, and the stacked "loop" and "graph" forms of bundles exported before
it: calibrated on their recorded decodes, INT8 GEMMs written, the INT8 model decoded and checked
against FP32 (the cpu profile; the trt profile's QDQ rules on the "layers" form too)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from edgekit.bundle import Bundle  # noqa: E402
from edgekit.check import CheckConfig, check_bundle  # noqa: E402
from edgekit.decode import ARDecodeConfig, decode_ar  # noqa: E402
from edgekit.quantize import QuantizeConfig, quantize_bundle  # noqa: E402
from edgekit.runtimes import open_runtime  # noqa: E402
from edgekit.spec import ar_cache_form  # noqa: E402
from tests.tiny_models import tiny_ar_spec  # noqa: E402


@pytest.mark.parametrize(("form", "profile"), [("layers", "cpu"), ("layers", "trt"), ("loop", "cpu"), ("graph", "cpu")])
def test_an_ar_bundle_of_each_cache_form_quantizes_decodes_and_checks(form, profile, tmp_path):
    import torch

    from edgekit.export.to_bundle import export_bundle

    with torch.random.fork_rng():
        torch.manual_seed(0)
        spec = tiny_ar_spec(batch=2, cache=form, depth=2)
    root = export_bundle(spec, tmp_path / form, source="tiny-ar").root
    cfg = QuantizeConfig(profile=profile, calib_samples=2, eval_samples=2, fallback=False)
    s = quantize_bundle(root, cfg if profile == "trt" else dataclasses.replace(cfg, isa="avx2"))
    bundle = Bundle.load(root)
    assert ar_cache_form(bundle.inputs, bundle.outputs) == form and bundle.has("int8")
    assert len([r for r in s["selection"]["int8"] if r["op"] == "Gemm"]) >= 8  # both layers' GEMMs
    assert s["range_drift"]["steps"]  # calibrated along the recorded decode's positions
    cond = {"class_id": np.array([0, 2], np.int64)}
    with open_runtime(bundle, "ort", "int8") as q, open_runtime(bundle, "ort", "fp32") as f:
        got = decode_ar(q, bundle.meta, cond, ARDecodeConfig())
        want = decode_ar(f, bundle.meta, cond, ARDecodeConfig())
    assert got.tokens.shape == want.tokens.shape == (2, bundle.meta["max_len"])
    assert np.mean(got.tokens == want.tokens) > 0.5  # INT8 follows FP32, not noise
    doc = check_bundle(root, CheckConfig(n=2))
    assert doc["candidate"] == "ort:int8" and np.isfinite(doc["metrics"]["logits_kl"])
