"""OpenVinoRuntime on tiny in-code ONNX models: numerics, the ping-pong buffers, settings that
reach the compiled model, blobs, devices and file errors; and the demo-kind decode loops (host
loop, AR KV cache, fused graphs, QDQ INT8) against ONNX Runtime on tiny torch models."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest

from edgekit.errors import EdgekitError, MissingDependency, TargetUnavailable, UsageError
from edgekit.runtimes.base import Runtime

ov = pytest.importorskip("openvino")

from edgekit.runtimes.openvino import (  # noqa: E402
    OpenVinoRuntime,
    OvOptions,
    _check_precision,
    available_devices,
    inference_precision_for,
)

TOL = dict(rtol=1e-5, atol=1e-5)  # f32 inference precision: only rounding differs from numpy
ONE = OvOptions(threads=1)


def _affine_onnx(path):
    """y = 0.5·x + 1, float32[2, 4] -> float32[2, 4]: an output that can be fed back as the input."""
    from tests.runtimes.conftest import save_model

    inits = [onnx.numpy_helper.from_array(np.float32(0.5), "a"), onnx.numpy_helper.from_array(np.float32(1.0), "b")]
    nodes = [onnx.helper.make_node("Mul", ["x", "a"], ["ax"]), onnx.helper.make_node("Add", ["ax", "b"], ["y"])]
    io = lambda n: onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 4])  # noqa: E731
    return save_model(path, nodes, [io("x")], [io("y")], inits)


@pytest.mark.parametrize("double_buffer", [True, False])
def test_matmul_add_matches_numpy(matmul_add_onnx, matmul_add_reference, x_feed, double_buffer):
    with OpenVinoRuntime(matmul_add_onnx, OvOptions(threads=1, double_buffer=double_buffer)) as rt:
        assert isinstance(rt, Runtime)
        assert {n: (s.shape, s.dtype) for n, s in rt.inputs.items()} == {"x": ((2, 3), "float32")}
        assert list(rt.outputs) == ["y", "z"]
        out = rt.run({"x": x_feed})
    expected = matmul_add_reference(x_feed)
    for name in ("y", "z"):
        assert out[name].dtype == np.float32 and out[name].shape == (2, 4)
        np.testing.assert_allclose(out[name], expected[name], **TOL)
    assert rt.device == "CPU"


def test_settings_are_the_compiled_models_and_f32_is_the_default(matmul_add_onnx):
    # The CPU plugin's own default on a bf16-capable CPU is bf16: an "fp32" run must ask for f32.
    with OpenVinoRuntime(matmul_add_onnx, OvOptions(threads=1, streams=1)) as rt:
        s = rt.settings
    assert s["threads"] == 1 and s["streams"] == 1
    assert s["performance_hint"] == "LATENCY" and s["inference_precision"] == "f32"
    assert "ov=" in s["runtime_requirements"]


def test_double_buffered_outputs_survive_one_run(matmul_add_onnx, matmul_add_reference, x_feed):
    with OpenVinoRuntime(matmul_add_onnx, ONE) as rt:
        assert rt.outputs_stay_valid == 2
        first = rt.run({"x": x_feed})["y"]
        kept = first.copy()
        second = rt.run({"x": x_feed * 2})["y"]
        assert second is not first
        np.testing.assert_array_equal(first, kept)  # still run 1's result
        third = rt.run({"x": x_feed * 3})["y"]
        assert third is first  # request 0's output again, rewritten in place
        np.testing.assert_allclose(first, matmul_add_reference(x_feed * 3)["y"], **TOL)
        np.testing.assert_allclose(second, matmul_add_reference(x_feed * 2)["y"], **TOL)


def test_ping_pong_feeds_an_output_back_without_wrapping_it(tmp_path):
    path = _affine_onnx(tmp_path / "affine.onnx")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = x.copy()
    with OpenVinoRuntime(path, ONE) as rt:
        wrapped = []
        real = rt._tensor
        rt._tensor = lambda array, **kw: (wrapped.append(array.shape), real(array, **kw))[1]
        seen = set()
        for _ in range(6):
            x = rt.run({"x": x})["y"]  # the last run's output is this run's input
            want = 0.5 * want + 1
            np.testing.assert_allclose(x, want, rtol=1e-6)
            seen.add(id(x))
        assert wrapped == [(2, 4)]  # only the first, loop-owned array was wrapped; then the outputs' own tensors
        assert len(seen) == 2  # two output sets, alternating


def test_feeding_the_output_about_to_be_overwritten_reads_a_copy(tmp_path):
    path = _affine_onnx(tmp_path / "affine.onnx")
    x = np.ones((2, 4), np.float32)
    with OpenVinoRuntime(path, ONE) as rt:
        first = rt.run({"x": x})["y"]  # request 0: 1.5
        rt.run({"x": x})  # request 1
        third = rt.run({"x": first})["y"]  # request 0 writes what it reads: must see 1.5
        np.testing.assert_allclose(third, np.full((2, 4), 1.75, np.float32))


def test_without_double_buffer_outputs_are_fresh_arrays(matmul_add_onnx, x_feed):
    with OpenVinoRuntime(matmul_add_onnx, OvOptions(threads=1, double_buffer=False)) as rt:
        assert rt.run({"x": x_feed})["y"] is not rt.run({"x": x_feed})["y"]


def test_non_contiguous_feed_is_accepted(matmul_add_onnx, matmul_add_reference, x_feed):
    with OpenVinoRuntime(matmul_add_onnx, ONE) as rt:
        out = rt.run({"x": np.asfortranarray(x_feed)})["y"]
    np.testing.assert_allclose(out, matmul_add_reference(x_feed)["y"], **TOL)


def test_bad_feeds_list_what_the_graph_expects(matmul_add_onnx):
    with OpenVinoRuntime(matmul_add_onnx, ONE) as rt, pytest.raises(EdgekitError) as err:
        rt.run({"x": np.zeros((3, 2), np.float32)})
    assert "feed 'x' is float32[3, 2], expected float32[2, 3]" in str(err.value)


def test_exported_blob_imports_and_computes_the_same(tmp_path, matmul_add_onnx, x_feed):
    with OpenVinoRuntime(matmul_add_onnx, ONE) as rt:
        want = rt.run({"x": x_feed})["z"].copy()
        path = tmp_path / "model.blob"
        assert rt.export_blob(path) == path.stat().st_size > 0
    with OpenVinoRuntime(path, ONE) as again:
        np.testing.assert_array_equal(again.run({"x": x_feed})["z"], want)
        assert again.settings["inference_precision"] == "f32"  # the import gets the same hint


def test_op_profile_names_kernels(matmul_add_onnx, x_feed):
    with OpenVinoRuntime(matmul_add_onnx, OvOptions(threads=1, profiling=True)) as rt:
        rt.run({"x": x_feed})
        rows = rt.op_profile()
    assert rows and all({"node", "type", "kernel", "us"} <= set(r) for r in rows)
    with OpenVinoRuntime(matmul_add_onnx, ONE) as rt, pytest.raises(UsageError, match="profiling=True"):
        rt.op_profile()


@pytest.mark.parametrize("content", [b"", b"this is not an onnx model\n", None], ids=["empty", "text", "truncated"])
def test_unreadable_model_file_is_one_error_naming_the_path(tmp_path, matmul_add_onnx, content):
    path = tmp_path / "broken.onnx"
    path.write_bytes(matmul_add_onnx.read_bytes()[:40] if content is None else content)
    with pytest.raises(EdgekitError) as err:
        OpenVinoRuntime(path, ONE)
    assert str(path) in str(err.value)
    chained = err.value.__cause__ or (None if err.value.__suppress_context__ else err.value.__context__)
    assert chained is None  # one message, no OpenVINO traceback


def test_a_blob_from_elsewhere_is_an_error_saying_rebuild(tmp_path):
    path = tmp_path / "model.blob"
    path.write_bytes(b"\x00garbage" * 16)
    with pytest.raises(EdgekitError, match="rebuild"):
        OpenVinoRuntime(path, ONE)


def test_missing_model_file_names_the_path(tmp_path):
    with pytest.raises(EdgekitError, match="does not exist"):
        OpenVinoRuntime(tmp_path / "nope.onnx", ONE)


def test_dynamic_dims_are_a_clear_error(dynamic_onnx):
    with pytest.raises(EdgekitError, match="static shapes"):
        OpenVinoRuntime(dynamic_onnx, ONE)


@pytest.mark.skipif(
    "GPU" in (available_devices() if "openvino" in sys.modules else []), reason="this host has an Intel GPU"
)
def test_a_device_this_host_lacks_is_target_unavailable(matmul_add_onnx):
    with pytest.raises(TargetUnavailable) as err:
        OpenVinoRuntime(matmul_add_onnx, OvOptions(device="GPU"))
    assert err.value.exit_code == 3
    assert "device GPU is not available" in str(err.value) and "CPU" in str(err.value)
    assert "OpenCL" in err.value.hint


def test_bf16_needs_the_capability():
    class Core:  # a CPU without BF16 in OPTIMIZATION_CAPABILITIES
        def get_property(self, device, name):
            return ["FP32", "INT8", "EXPORT_IMPORT"]

    with pytest.raises(TargetUnavailable, match="no bf16 support"):
        _check_precision(Core(), "CPU", "bf16")
    _check_precision(Core(), "CPU", "f32")


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"device": "TPU"}, "valid: CPU, GPU, NPU"),
        ({"performance_hint": "FAST"}, "valid: LATENCY, THROUGHPUT"),
        ({"inference_precision": "fp32"}, "valid: f32, bf16, f16, default"),
        ({"threads": -1}, "threads must be an int >= 0"),
    ],
)
def test_bad_options_list_valid_values(kwargs, says):
    with pytest.raises(UsageError, match=says):
        OvOptions(**kwargs)


def test_precision_mapping():
    assert [inference_precision_for(p) for p in ("fp32", "bf16", "fp16", "int8")] == ["f32", "bf16", "f16", "f32"]
    assert inference_precision_for("int8", rest="bf16") == "bf16"


def test_without_openvino_it_is_exit_3_with_the_install_line(monkeypatch, matmul_add_onnx):
    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(MissingDependency) as err:
        OpenVinoRuntime(matmul_add_onnx)
    assert err.value.exit_code == 3 and "pip install 'edgekit[openvino]'" in err.value.hint


def test_a_port_with_several_tensor_names_takes_the_graphs_own():
    # A QDQ graph's compiled logits port also answers to 'gemm_output_reshape_arg_token_94'.
    from edgekit.runtimes.openvino import _port_name

    class Port:
        def get_names(self):
            return {"gemm_output_reshape_arg_token_94", "logits"}

        def get_any_name(self):
            return "gemm_output_reshape_arg_token_94"

    assert _port_name(Port(), {"tokens", "logits"}) == "logits"
    assert _port_name(Port(), set()) == "gemm_output_reshape_arg_token_94"  # no graph names: stable, alphabetical
