"""``Sin`` over large tensors as the polynomial OpenVINO's CPU plugin fuses (runtimes/openvino_sin.py):
the same values as float64 sin to float32 rounding, no reference ``Sin`` kernel left in the
compiled graph, small ones (a time embedding) untouched, and the rewrite in edgekit's runtime and
in the IRs ``build`` writes for a CPU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.runtimes.conftest import save_model

pytest.importorskip("openvino")

SHAPE = [2, 64, 512]  # 65,536 values: a Snake activation's size class


def sin_model(path, shape=SHAPE, alpha=1.0):
    """x float32[shape] -> y = sin(alpha * x)^2 + sin(alpha * x) (the square: a Snake's form; the
    plain term keeps the sign in the output)."""
    nodes = [
        helper.make_node("Mul", ["x", "alpha"], ["ax"]),
        helper.make_node("Sin", ["ax"], ["s"]),
        helper.make_node("Mul", ["s", "s"], ["s2"]),
        helper.make_node("Add", ["s2", "s"], ["y"]),
    ]
    return save_model(
        path,
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [helper.make_tensor("alpha", TensorProto.FLOAT, [], [alpha])],
    )


def wide_values(shape=SHAPE):
    """Arguments from -12,000 to 12,000 (the exact range of the reduction) and a dense normal core."""
    n = int(np.prod(shape))
    ramp = np.linspace(-12000.0, 12000.0, n // 2)
    core = np.random.default_rng(0).standard_normal(n - n // 2) * 4.0
    return np.concatenate([ramp, core]).astype(np.float32).reshape(shape)


def executed_types(compiled):
    """The exec graph's layer types: the reference Sin runs as a ``Math`` node, a fused
    elementwise chain as a ``Subgraph``."""
    return {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()}


def test_the_polynomial_is_sin_to_float32_rounding_and_compiles_without_the_reference_kernel(tmp_path):
    import openvino as ov

    from edgekit.runtimes.openvino_sin import rewrite_sins

    x = wide_values()
    exact = np.sin(x.astype(np.float64))
    core = ov.Core()
    got = {}
    for rewrite in (False, True):
        model = core.read_model(str(sin_model(tmp_path / "m.onnx", alpha=1.0)))
        if rewrite:
            assert rewrite_sins(model) == 1
            assert "Sin" not in {op.get_type_name() for op in model.get_ordered_ops()}
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1})
        got[rewrite] = compiled({"x": x})[compiled.outputs[0]]
        assert ("Math" in executed_types(compiled)) is not rewrite  # the reference kernel is gone
        assert compiled.outputs[0].get_names() >= {"y"}  # the output keeps its name
    want = exact**2 + exact
    assert np.abs(got[True] - want).max() < 1e-6  # float32 rounding (the reference: ~1e-7)
    assert np.abs(got[True] - got[False]).max() < 1e-6


def test_a_small_sin_keeps_the_reference_kernel(tmp_path):
    import openvino as ov

    from edgekit.runtimes.openvino_sin import MIN_ELEMENTS, large_sins, rewrite_sins

    model = ov.Core().read_model(str(sin_model(tmp_path / "t.onnx", shape=[1, MIN_ELEMENTS // 2])))
    assert large_sins(model) == [] and rewrite_sins(model) == 0
    assert "Sin" in {op.get_type_name() for op in model.get_ordered_ops()}


def test_edgekit_runtime_rewrites_on_the_cpu_and_says_so(tmp_path):
    import onnxruntime as ort

    from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions

    path = sin_model(tmp_path / "m.onnx", alpha=2.5)
    x = wide_values() / 100.0
    with OpenVinoRuntime(path, OvOptions(inference_precision="f32", threads=1)) as rt:
        assert rt.settings["sin_rewritten"] == 1
        got = rt.run({"x": x})["y"]
        assert "Math" not in executed_types(rt.compiled)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(got - want).max() < 2e-6


def test_the_ir_written_for_a_cpu_carries_the_rewrite(tmp_path):
    import openvino as ov

    from edgekit.runtimes.openvino_ir import save_ir

    path = sin_model(tmp_path / "m.onnx")
    for for_cpu in (False, True):
        xml, _ = save_ir(path, tmp_path / f"ir-{for_cpu}" / "model.xml", False, for_cpu=for_cpu)
        ops = {op.get_type_name() for op in ov.Core().read_model(str(xml)).get_ordered_ops()}
        assert ("Sin" in ops) is not for_cpu  # a plain OpenVINO reading the CPU's IR gets the polynomial


def test_with_bf16_inference_the_polynomial_still_runs_in_f32():
    """The CPU plugin at bf16 inference precision computes a MatMul in bf16 and the elementwise
    chain after it in f32: the rewrite's outputs are the reference kernel's to float32 rounding
    (range reduction in bf16 would be off by far more)."""
    import openvino as ov
    import openvino.opset13 as ops

    from edgekit.runtimes.openvino_sin import rewrite_sins

    core = ov.Core()
    if "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        pytest.skip("this CPU has no bf16 (AVX512-BF16 or AMX): OpenVINO would run f32")
    x = wide_values() / 4.0
    outs = []
    for rewrite in (False, True):
        p = ops.parameter(SHAPE, np.float32, name="x")
        model = ov.Model([ops.sin(ops.matmul(p, ops.constant(np.eye(SHAPE[-1], dtype=np.float32)), False, False))], [p])
        if rewrite:
            assert rewrite_sins(model) == 1
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
        outs.append(compiled({"x": x})[compiled.outputs[0]])
    assert np.abs(outs[0] - outs[1]).max() < 1e-6


def test_builds_routes_for_a_cpu_ship_irs_with_the_rewrite(tmp_path):
    """``build``'s OpenVINO routes (builder/openvino_routes.py): every IR written for a CPU holds
    the polynomial, so the engine a plain OpenVINO loads runs as ``edgekit run`` does."""
    import openvino as ov

    from edgekit.builder.openvino_routes import write_routes

    path = sin_model(tmp_path / "m.onnx")
    for for_cpu in (False, True):
        routes, _ = write_routes(path, tmp_path / f"routes-{for_cpu}", for_cpu=for_cpu)
        irs = [r for r in routes.values() if r.files]
        assert "ir" in routes and irs
        for route in irs:
            ops = {op.get_type_name() for op in ov.Core().read_model(str(route.model)).get_ordered_ops()}
            assert ("Sin" in ops) is not for_cpu, route.name
