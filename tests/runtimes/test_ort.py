"""OrtRuntime on tiny in-code ONNX models: numerics, buffer reuse, provider and file errors."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest

from edgekit.errors import EdgekitError, TargetUnavailable, UsageError
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.ort import OrtOptions, OrtRuntime, session_device

pytest.importorskip("onnxruntime")

TOL = dict(rtol=1e-6, atol=1e-6)  # fp32 MatMul of 3 terms: only rounding differs from numpy


@pytest.mark.parametrize("io_binding", [True, False])
def test_matmul_add_matches_numpy(matmul_add_onnx, matmul_add_reference, x_feed, io_binding):
    with OrtRuntime(matmul_add_onnx, OrtOptions(io_binding=io_binding)) as rt:
        assert isinstance(rt, Runtime)
        assert {n: (s.shape, s.dtype) for n, s in rt.inputs.items()} == {"x": ((2, 3), "float32")}
        assert list(rt.outputs) == ["y", "z"]
        out = rt.run({"x": x_feed})
    expected = matmul_add_reference(x_feed)
    for name in ("y", "z"):
        assert out[name].dtype == np.float32 and out[name].shape == (2, 4)
        np.testing.assert_allclose(out[name], expected[name], **TOL)
    assert rt.providers_used == ["CPUExecutionProvider"] and rt.device == "CPUExecutionProvider"


def test_io_binding_on_and_off_give_identical_outputs(matmul_add_onnx, x_feed):
    with (
        OrtRuntime(matmul_add_onnx, OrtOptions(io_binding=True)) as bound,
        OrtRuntime(matmul_add_onnx, OrtOptions(io_binding=False)) as plain,
    ):
        a, b = bound.run({"x": x_feed}), plain.run({"x": x_feed})
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])


def test_io_binding_double_buffers_outputs(matmul_add_onnx, matmul_add_reference, x_feed):
    # Documented contract: an output survives the next run (two preallocated sets, alternating);
    # the run after that overwrites it in place.
    with OrtRuntime(matmul_add_onnx) as rt:
        assert rt.outputs_stay_valid == 2
        first = rt.run({"x": x_feed})["y"]
        kept = first.copy()
        second = rt.run({"x": x_feed * 2})["y"]
        assert second is not first
        np.testing.assert_array_equal(first, kept)  # still run 1's result
        third = rt.run({"x": x_feed * 3})["y"]
        assert third is first  # set 1 again, overwritten in place
        np.testing.assert_allclose(first, matmul_add_reference(x_feed * 3)["y"], **TOL)
        np.testing.assert_allclose(second, matmul_add_reference(x_feed * 2)["y"], **TOL)


def _affine_onnx(path):
    """y = 0.5·x + 1, float32[2, 4] -> float32[2, 4]: an output that can be fed back as the input."""
    from tests.runtimes.conftest import save_model

    inits = [onnx.numpy_helper.from_array(np.float32(0.5), "a"), onnx.numpy_helper.from_array(np.float32(1.0), "b")]
    nodes = [onnx.helper.make_node("Mul", ["x", "a"], ["ax"]), onnx.helper.make_node("Add", ["ax", "b"], ["y"])]
    io = lambda n: onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 4])  # noqa: E731
    return save_model(path, nodes, [io("x")], [io("y")], inits)


def test_ping_pong_feeds_an_output_back_without_copying_it(tmp_path):
    path = _affine_onnx(tmp_path / "affine.onnx")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = x.copy()
    with OrtRuntime(path) as rt:
        binds = []
        real = rt._binding.bind_cpu_input
        rt._binding.bind_cpu_input = lambda name, arr: (binds.append(name), real(name, arr))[1]
        seen = set()
        for _ in range(6):
            x = rt.run({"x": x})["y"]  # the output of the last run is this run's input
            want = 0.5 * want + 1
            np.testing.assert_allclose(x, want, rtol=1e-6)
            seen.add(id(x))
        assert binds == ["x"]  # only the first (loop-owned) array was wrapped; then OrtValues as they are
        assert len(seen) == 2  # two buffers, alternating


def test_feeding_the_output_about_to_be_overwritten_reads_a_copy(tmp_path):
    path = _affine_onnx(tmp_path / "affine.onnx")
    x = np.ones((2, 4), np.float32)
    with OrtRuntime(path) as rt:
        first = rt.run({"x": x})["y"]  # set 0: 1.5
        rt.run({"x": x})  # set 1
        third = rt.run({"x": first})["y"]  # writes set 0 while reading it: must see 1.5, not garbage
        np.testing.assert_allclose(third, np.full((2, 4), 1.75, np.float32))


def test_without_io_binding_outputs_are_fresh_arrays(matmul_add_onnx, x_feed):
    with OrtRuntime(matmul_add_onnx, OrtOptions(io_binding=False)) as rt:
        assert rt.run({"x": x_feed})["y"] is not rt.run({"x": x_feed})["y"]


def test_non_contiguous_feed_is_accepted(matmul_add_onnx, matmul_add_reference, x_feed):
    fortran = np.asfortranarray(x_feed)
    with OrtRuntime(matmul_add_onnx) as rt:
        np.testing.assert_allclose(rt.run({"x": fortran})["y"], matmul_add_reference(x_feed)["y"], **TOL)


@pytest.mark.parametrize(
    "feeds, says",
    [
        ({"q": np.zeros((2, 3), np.float32)}, "missing ['x'], unexpected ['q']"),
        ({"x": np.zeros((3, 2), np.float32)}, "feed 'x' is float32[3, 2], expected float32[2, 3]"),
        ({"x": np.zeros((2, 3), np.float64)}, "feed 'x' is float64[2, 3], expected float32[2, 3]"),
    ],
    ids=["wrong-name", "wrong-shape", "wrong-dtype"],
)
def test_bad_feeds_list_what_the_graph_expects(matmul_add_onnx, feeds, says):
    with OrtRuntime(matmul_add_onnx) as rt, pytest.raises(EdgekitError) as err:
        rt.run(feeds)
    assert says in str(err.value)
    assert "the graph expects x: float32[2, 3]" in str(err.value)


def test_unavailable_provider_warns_naming_available_ones_and_runs_on_cpu(
    matmul_add_onnx, matmul_add_reference, x_feed, caplog
):
    options = OrtOptions(providers=("CUDAExecutionProviderX", "CPUExecutionProvider"))
    # The warning is the report's (rt.warnings, printed once by the stage's render); the log has
    # it at debug level only.
    with caplog.at_level(logging.DEBUG), OrtRuntime(matmul_add_onnx, options) as rt:
        out = rt.run({"x": x_feed})
    assert len(rt.warnings) == 1
    assert "CUDAExecutionProviderX" in rt.warnings[0] and "available: [" in rt.warnings[0]
    assert "'CPUExecutionProvider'" in rt.warnings[0]
    assert "CUDAExecutionProviderX" in caplog.text
    assert rt.providers_used == ["CPUExecutionProvider"] and rt.device == "CPUExecutionProvider"
    np.testing.assert_allclose(out["y"], matmul_add_reference(x_feed)["y"], **TOL)


def test_no_available_provider_is_target_unavailable(matmul_add_onnx):
    with pytest.raises(TargetUnavailable) as err:
        OrtRuntime(matmul_add_onnx, OrtOptions(providers=("NoSuchExecutionProvider",)))
    assert err.value.exit_code == 3
    assert "NoSuchExecutionProvider" in str(err.value) and "CPUExecutionProvider" in str(err.value)


@pytest.mark.parametrize("content", [b"", b"this is not an onnx model\n", None], ids=["empty", "text", "truncated"])
def test_unreadable_model_file_is_one_error_naming_the_path(tmp_path, matmul_add_onnx, content):
    path = tmp_path / "broken.onnx"
    path.write_bytes(matmul_add_onnx.read_bytes()[:40] if content is None else content)
    with pytest.raises(EdgekitError) as err:
        OrtRuntime(path)
    assert str(path) in str(err.value)
    chained = err.value.__cause__ or (None if err.value.__suppress_context__ else err.value.__context__)
    assert chained is None  # one message, no ORT traceback


def test_missing_model_file_names_the_path(tmp_path):
    with pytest.raises(EdgekitError, match="does not exist"):
        OrtRuntime(tmp_path / "nope.onnx")


def test_dynamic_dims_are_a_clear_error(dynamic_onnx):
    with pytest.raises(EdgekitError) as err:
        OrtRuntime(dynamic_onnx)
    message = str(err.value)
    assert "static shapes" in message and "input 'x' ['batch', 3]" in message
    assert "make_dynamic_shape_fixed --dim_param batch" in message


def test_bad_graph_optimization_lists_valid_values():
    with pytest.raises(UsageError, match="valid: disable, basic, extended, all"):
        OrtOptions(graph_optimization="max")


def test_provider_options_must_match_providers():
    with pytest.raises(UsageError, match="one mapping per provider"):
        OrtOptions(providers=("CPUExecutionProvider",), provider_options=({}, {}))


def test_optimized_model_path_is_written_and_loads(tmp_path, matmul_add_onnx, x_feed):
    optimized = tmp_path / "cache" / "matmul_add.opt.onnx"
    options = OrtOptions(graph_optimization="basic", optimized_model_path=str(optimized))
    with OrtRuntime(matmul_add_onnx, options) as rt:
        expected = rt.run({"x": x_feed})["y"].copy()
    assert optimized.is_file() and optimized.stat().st_size > 0
    with OrtRuntime(optimized, OrtOptions(graph_optimization="disable")) as again:
        np.testing.assert_array_equal(again.run({"x": x_feed})["y"], expected)


def test_run_after_close_is_an_error(matmul_add_onnx, x_feed):
    rt = OrtRuntime(matmul_add_onnx)
    rt.close()
    rt.close()  # idempotent
    with pytest.raises(EdgekitError, match="after close"):
        rt.run({"x": x_feed})


SHARED_ARENA_SCRIPT = """
import json, sys
import numpy as np
from edgekit.runtimes.ort import OrtOptions, OrtRuntime

path, x = sys.argv[1], np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
own = OrtRuntime(path)
ref = own.run({"x": x})["z"].copy()
shared = [OrtRuntime(path, OrtOptions(shared_arena=True, spin_between_runs=False)) for _ in range(2)]
after = OrtRuntime(path)  # a session with its own arena, after the environment's was registered
print(json.dumps({
    "entries": [[rt.session.get_session_options().get_session_config_entry(k)
                 for k in ("session.use_env_allocators", "session.force_spinning_stop")]
                for rt in shared],
    "same": [bool(np.array_equal(rt.run({"x": x})["z"], ref)) for rt in (*shared, after, *shared)],
}))
"""


def test_shared_arena_sessions_take_memory_from_the_environment_arena(matmul_add_onnx):
    # A fresh process: the arena is registered with ORT's environment once per process.
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", SHARED_ARENA_SCRIPT, str(matmul_add_onnx)], capture_output=True, text=True, check=True
    )
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["entries"] == [["1", "1"], ["1", "1"]]
    assert all(doc["same"]) and len(doc["same"]) == 5


def test_taking_turns_options_spin_inside_runs_and_share_the_arena():
    from edgekit.runtimes.ort import taking_turns

    base = OrtOptions(intra_op_threads=2, spin_between_runs=True)
    turns = taking_turns(base)
    assert (turns.spin_between_runs, turns.shared_arena, turns.allow_spinning, turns.intra_op_threads) == (
        False,
        True,
        True,
        2,
    )
    assert taking_turns(base, shared=False) is base


@pytest.mark.parametrize("io_binding", [True, False])
def test_a_run_onnx_runtime_refuses_is_one_line_naming_the_file_and_what_to_check(tmp_path, io_binding):
    """An index past a Gather's table (class ids drawn from a manifest range the graph never saw):
    ORT raises its own types from session.run and a RuntimeError from run_with_iobinding; both are
    one EdgekitError line, never a traceback."""
    import onnx
    from onnx import TensorProto, helper

    from edgekit.errors import EdgekitError
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    table = helper.make_tensor("table", TensorProto.FLOAT, [4, 2], np.arange(8, dtype=np.float32))
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["y"])],
        "gather",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "gather.onnx")
    with OrtRuntime(tmp_path / "gather.onnx", OrtOptions(io_binding=io_binding)) as rt:
        np.testing.assert_array_equal(rt.run({"idx": np.array([3, 0, 1])})["y"][0], [6.0, 7.0])
        with pytest.raises(EdgekitError) as info:
            rt.run({"idx": np.array([0, 9, 2])})
        assert str(info.value).startswith("ort: running gather.onnx failed:") and "idx=9" in str(info.value)
        assert "\n" not in str(info.value) and "--cond" in info.value.hint
        assert rt.run({"idx": np.array([1, 1, 1])})["y"].shape == (3, 2)  # the session still runs


class _Session:
    """What ``session_device`` reads of an ORT session: providers and their options as ORT
    returns them (option values are strings)."""

    def __init__(self, providers, options):
        self._providers, self._options = providers, options

    def get_providers(self):
        return self._providers

    def get_provider_options(self):
        return self._options


@pytest.mark.parametrize(
    ("providers", "options", "device"),
    [
        (
            ["CUDAExecutionProvider", "CPUExecutionProvider"],
            {"CUDAExecutionProvider": {"device_id": "0"}},
            "CUDAExecutionProvider",
        ),
        (
            ["CUDAExecutionProvider", "CPUExecutionProvider"],
            {"CUDAExecutionProvider": {"device_id": "1"}},
            "CUDAExecutionProvider:1",
        ),
        (
            ["TensorrtExecutionProvider"],
            {"TensorrtExecutionProvider": {"device_id": "3"}},
            "TensorrtExecutionProvider:3",
        ),
        (["CPUExecutionProvider"], {"CPUExecutionProvider": {}}, "CPUExecutionProvider"),
    ],
)
def test_session_device_names_the_gpu_the_provider_options_chose(providers, options, device):
    # A power probe compares it with the GPU it reads (probes.power.scope): cuda:1's decode is
    # not cuda:0's board's energy.
    assert session_device(_Session(providers, options)) == device
