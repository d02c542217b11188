"""TorchRuntime: the reference backend agrees with ONNX Runtime on the same exported module."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from edgekit.errors import EdgekitError, MissingDependency
from edgekit.runtimes.ort import OrtRuntime
from edgekit.runtimes.torch_ref import TorchRuntime
from edgekit.spec import TensorSpec

torch = pytest.importorskip("torch")

INPUTS = {"x": TensorSpec((2, 3), "float32")}
OUTPUTS = {"y": TensorSpec((2, 4), "float32"), "best": TensorSpec((2,), "int64")}


class TinyHead(torch.nn.Module):
    """x (B, 3) -> y (B, 4) = tanh(linear(dropout(x))), best (B,) = argmax(y)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 4)
        self.dropout = torch.nn.Dropout(0.5)  # must be off in eval mode

    def forward(self, x):
        y = torch.tanh(self.linear(self.dropout(x)))
        return y, y.argmax(dim=-1)


def make_module() -> TinyHead:
    torch.manual_seed(0)
    return TinyHead()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the TorchScript exporter's notices
def test_matches_ort_on_the_exported_module(tmp_path, x_feed):
    module = make_module()
    path = tmp_path / "tiny_head.onnx"
    torch.onnx.export(
        module.eval(),
        (torch.from_numpy(x_feed),),
        str(path),
        dynamo=False,
        input_names=["x"],
        output_names=["y", "best"],
        opset_version=17,
    )
    with TorchRuntime(module, INPUTS, OUTPUTS) as ref, OrtRuntime(path) as ort_rt:
        assert ort_rt.inputs == ref.inputs and ort_rt.outputs == ref.outputs
        expected, got = ref.run({"x": x_feed}), ort_rt.run({"x": x_feed})
    assert expected["y"].dtype == np.float32 and expected["best"].dtype == np.int64
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["best"], expected["best"])


def test_eval_mode_and_repeatable(x_feed):
    module = make_module().train()
    with TorchRuntime(module, INPUTS, OUTPUTS) as rt:
        assert not module.training and rt.device == "cpu"
        first = rt.run({"x": x_feed})["y"].copy()
        np.testing.assert_array_equal(rt.run({"x": x_feed})["y"], first)


def test_single_tensor_output_is_mapped_to_the_one_name(x_feed):
    linear = torch.nn.Linear(3, 4)
    with TorchRuntime(linear, INPUTS, {"y": TensorSpec((2, 4), "float32")}) as rt:
        out = rt.run({"x": x_feed})
    assert list(out) == ["y"]
    np.testing.assert_allclose(out["y"], linear(torch.from_numpy(x_feed)).detach().numpy(), rtol=1e-6)


def test_output_count_mismatch_names_the_spec(x_feed):
    with TorchRuntime(torch.nn.Linear(3, 4), INPUTS, OUTPUTS) as rt, pytest.raises(EdgekitError) as err:
        rt.run({"x": x_feed})
    assert "returned 1 tensor(s)" in str(err.value) and "best: int64[2]" in str(err.value)


def test_feeds_are_validated(x_feed):
    with TorchRuntime(make_module(), INPUTS, OUTPUTS) as rt, pytest.raises(EdgekitError, match="expected float32"):
        rt.run({"x": x_feed.astype(np.float16)})


def test_missing_torch_is_missing_dependency(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(MissingDependency) as err:
        TorchRuntime(object(), INPUTS, OUTPUTS)
    assert err.value.exit_code == 3 and "pip install 'edgekit[export]'" in str(err.value)


def test_threads_apply_during_run_and_are_restored():
    torch = pytest.importorskip("torch")
    from edgekit.runtimes.torch_ref import TorchRuntime
    from edgekit.spec import TensorSpec

    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(torch.get_num_threads())
            return x + 1

    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    spec = {"x": TensorSpec((2,), "float32")}
    rt = TorchRuntime(Probe(), spec, {"y": TensorSpec((2,), "float32")}, threads=want)
    rt.run({"x": np.zeros(2, np.float32)})
    assert seen == [want] and torch.get_num_threads() == before


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_chunk_window_bundle_runs_on_torch_as_on_ort(tmp_path):
    """`export --chunk-frames` cuts the frame axis to the window: the torch runtime rebuilds the
    module from its source and runs it at the window's length, as the exported graph does."""
    from edgekit.bundle import Bundle
    from edgekit.export import export_bundle, window_spec
    from edgekit.runtimes import open_runtime
    from tests.stream import tiny_stream

    root = export_bundle(
        window_spec(tiny_stream.flow(), 4, context=4), tmp_path / "flow-chunk", source="tests.stream.tiny_stream:flow"
    ).root
    bundle = Bundle.load(root)
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.normal(size=(1, 8, 4)).astype(np.float32),
        "t": np.array([0.3], np.float32),
        "tokens": rng.integers(0, 8, size=(1, 4)),
    }
    with open_runtime(bundle, "torch") as rt, open_runtime(bundle, "ort") as ort_rt:
        assert rt.inputs["x"].shape == (1, 8, 4)
        np.testing.assert_allclose(rt.run(feeds)["v"], ort_rt.run(feeds)["v"], rtol=1e-4, atol=1e-5)
