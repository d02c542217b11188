import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

from edgekit.bundle import Bundle  # noqa: E402
from edgekit.errors import ExportError  # noqa: E402
from edgekit.export import ExportConfig  # noqa: E402
from edgekit.export.onnx_export import RANDOM_OPS, export_onnx  # noqa: E402
from edgekit.export.to_bundle import export_bundle  # noqa: E402
from edgekit.spec import ModelSpec, TensorSpec  # noqa: E402


@pytest.mark.parametrize("kind", ["masked", "flow", "ar"])
def test_demo_exports_are_static_verified_and_noise_free(demo_bundles, kind):
    b = Bundle.load(demo_bundles[kind])
    model = onnx.load(str(b.path_of("fp32")))
    assert model.opset_import[0].version >= 17
    assert not {n.op_type for n in model.graph.node} & RANDOM_OPS
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        assert all(d.HasField("dim_value") and d.dim_value > 0 for d in dims), value.name
    ver = b.manifest["verification"]["fp32"]
    assert ver["passed"] and ver["samples"] == 6
    for out in ver["outputs"].values():
        assert out["max_abs"] < 1e-3
    assert b.manifest["provenance"]["torch"] and b.manifest["provenance"]["onnxruntime"]
    assert b.manifest["graph"]["fp32"]["ops"]["MatMul"] > 0


class Flaky(torch.nn.Module):
    """Differs between torch and the exported graph: random noise drawn inside forward."""

    def forward(self, x, t):
        return x + torch.randn_like(x)


class Shifty(torch.nn.Module):
    """Exports fine but computes something else in ONNX than torch (a stand-in for a bad op)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, t):
        return x * 2.0


def _flow_spec(module, name="toy"):
    return ModelSpec(
        name=name,
        kind="flow",
        module=module,
        inputs={"x": TensorSpec((1, 4, 3), "float32"), "t": TensorSpec((1,), "float32", 0.0, 1.0)},
        outputs={"v": TensorSpec((1, 4, 3), "float32")},
        meta={"channels": 3, "frames": 4, "conditioning": {}},
    )


def test_random_ops_are_rejected(tmp_path):
    with pytest.raises(ExportError, match="RandomNormalLike|pass noise as a graph input"):
        export_onnx(_flow_spec(Flaky()), tmp_path / "m.onnx", ExportConfig())


def test_verification_failure_is_an_error_with_numbers_and_leaves_no_bundle(tmp_path, monkeypatch):
    spec = _flow_spec(Shifty())
    from edgekit.export import to_bundle

    real_compare = to_bundle.compare

    def skewed(ref, cand, feeds, cfg):  # simulate a backend that disagrees with torch
        class Off:
            inputs, outputs = cand.inputs, cand.outputs

            def run(self, feeds):
                return {k: v + 0.5 for k, v in cand.run(feeds).items()}

        return real_compare(ref, Off(), feeds, cfg)

    monkeypatch.setattr(to_bundle, "compare", skewed)
    with pytest.raises(ExportError, match=r"v: max abs 0\.5"):
        export_bundle(spec, tmp_path / "b", ExportConfig())
    assert not (tmp_path / "b" / "edgekit.json").exists()
    assert not [p for p in (tmp_path / "b").iterdir()] if (tmp_path / "b").exists() else True


def test_opset_too_old(tmp_path):
    with pytest.raises(ExportError, match="--opset 13 is too old"):
        export_onnx(_flow_spec(Shifty()), tmp_path / "m.onnx", ExportConfig(opset=13))


def test_output_shape_mismatch_is_caught(tmp_path):
    spec = ModelSpec(
        name="bad",
        kind="flow",
        module=Shifty(),
        inputs={"x": TensorSpec((1, 4, 3), "float32"), "t": TensorSpec((1,), "float32")},
        outputs={"v": TensorSpec((1, 4, 5), "float32")},
        meta={"channels": 3, "frames": 4, "conditioning": {}},
    )
    with pytest.raises(ExportError, match="has shape"):
        export_onnx(spec, tmp_path / "m.onnx", ExportConfig())


def test_trajectory_inputs_look_like_decode_states(demo_bundles):
    from edgekit.export.verify import trajectory_feeds
    from edgekit.models import load_spec
    from edgekit.runtimes.torch_ref import TorchRuntime

    spec = load_spec("masked-demo", batch=2)
    with TorchRuntime(spec.module, spec.inputs, spec.outputs) as ref:
        feeds = trajectory_feeds(spec, ref, 3, np.random.default_rng(0))
    mask_share = [float(np.mean(f["tokens"] == spec.meta["mask_id"])) for f in feeds]
    assert mask_share[0] < mask_share[1] < mask_share[2]  # early to late decode states

    spec = load_spec("ar-demo", batch=2)
    with TorchRuntime(spec.module, spec.inputs, spec.outputs) as ref:
        feeds = trajectory_feeds(spec, ref, 2, np.random.default_rng(0))
    pos = int(feeds[1]["pos"][0])
    for layer in ("k_cache_0", "v_cache_3"):  # [B, H, Lmax, hd]: the demo's "layers" cache form
        assert pos > 0 and np.abs(feeds[1][layer][:, :, :pos]).sum() > 0  # filled by real steps
        assert np.abs(feeds[1][layer][:, :, pos:]).sum() == 0


def test_export_logs_no_torchvision_skips(tmp_path, caplog):
    """The exporter's 'torchvision is not installed. Skipping torchvision::nms' lines (four per
    export, issue #15) are dropped; the filter is gone after the export."""
    import logging

    with caplog.at_level(logging.WARNING):
        export_onnx(_flow_spec(Shifty()), tmp_path / "m.onnx", ExportConfig())
    assert not [r for r in caplog.records if "torchvision" in r.getMessage()]
    assert not logging.getLogger("torch.onnx._internal.exporter._registration").filters


def test_export_refuses_to_replace_a_bundle_and_names_what_would_be_lost(masked, monkeypatch):
    """Issue #31: `export masked-demo -o bundles/masked` over an existing bundle silently dropped
    its INT8 model and engines. Without --overwrite: exit 2 before any work, naming what would go."""
    import json

    from typer.testing import CliRunner

    from edgekit.builder import build_bundle
    from edgekit.cli import app

    build_bundle(masked, "cpu", "fp32")
    before = {p.name: p.read_bytes() for p in masked.iterdir() if p.is_file()}
    calls = []
    monkeypatch.setattr("edgekit.export.stage.load_spec", lambda *a, **k: calls.append(a))  # no work may start
    r = CliRunner().invoke(app, ["export", "masked-demo", "-o", str(masked), "--json"])
    assert r.exit_code == 2 and not calls, r.output
    error = json.loads(r.stdout)["error"]
    assert f"-o {masked} already holds a bundle (model masked-demo)" in error
    assert "its fp32 model" in error and "1 engine (cpu/fp32)" in error and "--overwrite" in error
    assert {p.name: p.read_bytes() for p in masked.iterdir() if p.is_file()} == before
    monkeypatch.undo()
    r = CliRunner().invoke(app, ["export", "masked-demo", "-o", str(masked), "--overwrite", "--batch", "2", "--json"])
    assert r.exit_code == 0, r.output
    assert Bundle.load(masked).engines == {}  # replaced: the old graph's engine went with it


def test_what_a_replaced_bundle_loses_in_words(tmp_path):
    from edgekit.export.stage import replaced_contents

    manifest = {
        "artifacts": {
            "fp32": {},
            "int8": {},
            "int8-bucket-1": {},
            "conditions": {},
            "fused-step": {},
            "quantize-overrides": {},
        },
        "engines": {"cpu/fp32": {}, "cpu/int8": {}},
        "flow_quality": {"rungs": []},
    }
    assert replaced_contents(None) == ["its fp32 model"]  # a manifest that does not load: its model at least
    assert replaced_contents(Bundle(tmp_path, manifest)) == [
        "its fp32 model",
        "the int8 model (2 step buckets)",
        "the held-out condition rows quantize stored",
        "the fused step graph",
        "the quantize overrides (edgekit debug --fix)",
        "2 engines (cpu/fp32, cpu/int8)",
        "the measured flow quality table (run --latency-budget-ms)",
    ]
