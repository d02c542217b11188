"""The OpenVINO route choice in pieces (builder/openvino_routes.py): which route wins from
per-route samples and the budget, what the budget keeps, the IR files each route writes (real
OpenVINO), and the timing's shape (stand-in runtimes; nothing asserts a time)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from build_helpers import tiny_model  # tests/builder/build_helpers.py

from edgekit.builder.openvino_routes import (
    FLOAT_MATCH_DB,
    ROUTE_MARGIN,
    choose_route,
    measure_routes,
    route_accuracy,
    write_routes,
)

pytest.importorskip("openvino")


def test_the_fastest_route_that_keeps_the_budget_wins():
    samples = {"onnx": [3.0, 3.1, 2.9], "ir": [2.0, 2.1, 1.9], "ir-fp16": [2.5, 2.5, 2.5]}
    route, why = choose_route(samples, {"onnx": True, "ir": True, "ir-fp16": True})
    assert route == "ir" and why.startswith("ir was 50.0% faster than onnx")


def test_a_route_failing_the_budget_is_skipped_however_fast():
    samples = {"onnx": [3.0] * 3, "ir": [1.0] * 3, "ir-fp16": [2.0] * 3}
    route, why = choose_route(samples, {"onnx": True, "ir": False, "ir-fp16": True})
    assert route == "ir-fp16" and why.endswith("; ir failed the budget")
    route, why = choose_route(samples, {"onnx": True, "ir": False, "ir-fp16": False})
    assert route == "onnx" and why.endswith("; ir, ir-fp16 failed the budget")


def test_the_default_route_stays_unless_another_is_the_margin_faster():
    just_under = 1 + ROUTE_MARGIN * 0.9
    samples = {"onnx": [just_under] * 4, "ir": [1.0] * 4}
    route, why = choose_route(samples, {"onnx": True, "ir": True})
    assert route == "onnx" and f"under the {ROUTE_MARGIN:.0%} a switch needs: onnx kept" in why
    # Paired by round: a load spike in two rounds that slowed both routes alike changes no ratio.
    samples = {"onnx": [1.1, 1.1, 9.9, 9.9, 1.1], "ir": [1.0, 1.0, 9.0, 9.0, 1.0]}
    assert choose_route(samples, {"onnx": True, "ir": True})[0] == "ir"
    # A tie keeps the default.
    assert choose_route({"onnx": [1.0], "ir": [1.0]}, {"onnx": True, "ir": True})[0] == "onnx"
    with pytest.raises(ValueError, match="the default route 'onnx' has no samples"):
        choose_route({"ir": [1.0]}, {"ir": True})


def _outs(*arrays):
    return [{"logits": a} for a in arrays]


def test_a_route_may_add_a_tenth_of_the_noise_the_source_carries_against_fp32():
    rng = np.random.default_rng(0)
    fp32 = rng.standard_normal((4, 256)).astype(np.float32)
    source = fp32 + 0.01 * rng.standard_normal(fp32.shape).astype(np.float32)  # about 40 dB from FP32
    close = source + 0.001 * rng.standard_normal(fp32.shape).astype(np.float32)  # about 60 dB from the source
    far = source + 0.01 * rng.standard_normal(fp32.shape).astype(np.float32)  # about 40 dB: doubles the noise
    table, required = route_accuracy({"onnx": _outs(source), "ir": _outs(close), "ir-fp16": _outs(far)}, _outs(fp32))
    assert 49 < required < 51  # the source's 40 dB + 10
    assert table["onnx"]["kept"] and table["ir"]["kept"] and not table["ir-fp16"]["kept"]
    assert table["ir"]["snr_vs_source_db"] > required > table["ir-fp16"]["snr_vs_source_db"]
    assert "adds noise at" in table["ir-fp16"]["why"] and table["ir-fp16"]["snr_vs_fp32_db"] < 40
    # An FP32 source (no reference of its own) asks float rounding of the route.
    table, required = route_accuracy({"onnx": _outs(fp32), "ir": _outs(close), "ir-fp16": _outs(fp32)}, None)
    assert required == FLOAT_MATCH_DB and not table["ir"]["kept"] and table["ir-fp16"]["kept"]
    assert table["ir-fp16"]["snr_vs_source_db"] > 200  # an exact match: finite, for the manifest


def test_the_lowest_output_decides_a_multi_output_graph():
    a = np.ones((2, 8), np.float32)
    outs = {"onnx": [{"logits": a, "k": a}], "ir": [{"logits": a, "k": a * 1.5}]}
    table, _ = route_accuracy(outs, None)
    assert not table["ir"]["kept"] and table["ir"]["snr_vs_source_db"] < 10


def test_a_quantized_models_fp16_ir_is_its_plain_ir_and_a_float_models_is_not(tmp_path):
    qdq = tmp_path / "int8.onnx"
    onnx.save(tiny_model(qdq_zero_point=np.array(128, np.uint8)), str(qdq))
    routes, unavailable = write_routes(qdq, tmp_path / "int8")
    assert not unavailable and routes["onnx"].model == qdq and routes["onnx"].files == {}
    ir = routes["ir"]
    assert ir.model.suffix == ".xml" and ir.files == {"model": ir.model, "weights": ir.model.with_suffix(".bin")}
    assert all(p.is_file() for p in ir.files.values())
    assert routes["ir-fp16"].same_as == "ir" and "ignores compress_to_fp16" in routes["ir-fp16"].note

    fp32 = tmp_path / "fp32.onnx"
    onnx.save(tiny_model(), str(fp32))
    routes, _ = write_routes(fp32, tmp_path / "fp32")
    assert routes["ir-fp16"].same_as is None
    f16, f32 = (routes[n].files["weights"].stat().st_size for n in ("ir-fp16", "ir"))
    assert f16 < f32  # the float weights stored in f16


def test_a_route_openvino_cannot_write_is_recorded_unavailable(tmp_path):
    model = tiny_model()
    model.graph.node.append(onnx.helper.make_node("NoSuchOp", ["logits"], ["extra"], domain="com.example"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("extra", onnx.TensorProto.FLOAT, None))
    model.opset_import.append(onnx.helper.make_opsetid("com.example", 1))
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    routes, unavailable = write_routes(bad, tmp_path / "w")
    assert list(routes) == ["onnx"] and set(unavailable) == {"ir", "ir-fp16", "ir-hoisted"}
    assert "cannot write bad.onnx as IR" in unavailable["ir"] and "com.example.NoSuchOp" in unavailable["ir"]
    assert unavailable["ir-hoisted"].startswith("no activation Q/DQ behind a Reshape to move, and the ir route")


def test_the_hoisted_route_is_the_ir_of_the_rewritten_graph_and_ir_itself_where_nothing_moves(tmp_path):
    qdq = tmp_path / "int8.onnx"
    onnx.save(tiny_model(qdq_zero_point=np.array(128, np.uint8), reshape=True), str(qdq))
    routes, unavailable = write_routes(qdq, tmp_path / "int8")
    hoisted, ir = routes["ir-hoisted"], routes["ir"]
    assert not unavailable and hoisted.same_as is None and hoisted.note.startswith("1 activation Q/DQ pair moved")
    assert hoisted.files["model"].is_file() and hoisted.files["model"] != ir.files["model"]
    assert hoisted.files["weights"] == hoisted.files["model"].with_suffix(".bin") and hoisted.files["weights"].is_file()
    assert not (tmp_path / "int8" / "ir-hoisted" / "model.onnx").exists()  # the rewritten ONNX is scratch

    plain = tmp_path / "plain.onnx"  # the pair right before the MatMul already: nothing to move
    onnx.save(tiny_model(qdq_zero_point=np.array(128, np.uint8)), str(plain))
    routes, _ = write_routes(plain, tmp_path / "plain")
    assert routes["ir-hoisted"].same_as == "ir" and routes["ir-hoisted"].files == routes["ir"].files


class _Counting:
    """A stand-in runtime that counts its forwards."""

    def __init__(self):
        self.calls = 0

    def run(self, feeds):
        self.calls += 1
        return {}


def test_measure_routes_returns_per_route_samples_of_interleaved_bursts():
    runtimes = {"onnx": _Counting(), "ir": _Counting()}
    samples = measure_routes(runtimes, {"x": np.zeros(1)}, rounds=4, burst=3)
    assert set(samples) == {"onnx", "ir"} and all(len(v) == 4 for v in samples.values())
    assert all(rt.calls == (4 + 1) * 3 for rt in runtimes.values())  # one warm-up round, then 4 timed
    assert all(ms >= 0 for v in samples.values() for ms in v)
    sized = measure_routes({"onnx": _Counting()}, {"x": np.zeros(1)})  # rounds and burst sized from a first round
    assert 5 <= len(sized["onnx"]) <= 15
