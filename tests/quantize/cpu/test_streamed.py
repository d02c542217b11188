"""The QDQ quantizer with the weights read from their side file one at a time (``cpu/streamed.py``):
the graph it writes is ``quantize_static``'s, byte for byte once recorded, and the model the
quantizer holds never carries the FP32 weights (``quantize_static``'s holds all of them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from edgekit.quantize.config import QuantizeConfig
from tests.external_data import inline_tensor_bytes
from tests.quantize.conftest import build_tiny_model, tiny_feeds

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnxruntime.quantization import qdq_quantizer  # noqa: E402

from edgekit.quantize import graph as qgraph  # noqa: E402
from edgekit.quantize.calibrate import calibration_reader  # noqa: E402
from edgekit.quantize.cpu import ptq, select, streamed  # noqa: E402
from edgekit.runtimes.onnx_file import save_with_one_side_file  # noqa: E402

pytestmark = pytest.mark.skipif(not ptq.supports_calibration_cache(), reason="onnxruntime without a calibration cache")


def _prepared_with_side_file(folder: Path) -> Path:
    """The tiny graph as the run's prepared model: every weight of 1 KiB and up in prepared.onnx.data."""
    folder.mkdir()
    model = onnx.load(str(build_tiny_model(folder / "tiny.onnx")))
    path = folder / "prepared.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="prepared.onnx.data", size_threshold=1024)
    (folder / "tiny.onnx").unlink()
    return path


def _external_bytes(path: Path) -> int:
    model = onnx.load(str(path), load_external_data=False)
    entries = [{e.key: e.value for e in t.external_data} for t in model.graph.initializer if t.external_data]
    return sum(int(e["length"]) for e in entries)


class HeldByQuantizer:
    """The tensor bytes the quantizer's ModelProto holds in memory when it starts and once every
    weight is quantized (before it drops the float ones): a stand-in for its memory."""

    def __init__(self, monkeypatch):
        self.held: list[int] = []
        start, weights = qdq_quantizer.QDQQuantizer.quantize_model, qdq_quantizer.QDQQuantizer._quantize_normal_tensors

        def quantize_model(quantizer):
            self.held.append(inline_tensor_bytes(quantizer.model.model))
            return start(quantizer)

        def quantize_normal_tensors(quantizer):
            weights(quantizer)
            self.held.append(inline_tensor_bytes(quantizer.model.model))

        monkeypatch.setattr(qdq_quantizer.QDQQuantizer, "quantize_model", quantize_model)
        monkeypatch.setattr(qdq_quantizer.QDQQuantizer, "_quantize_normal_tensors", quantize_normal_tensors)


def _quantize(tmp_path, monkeypatch, profile: str, stream: bool, nodes=None, weight_only=(), scheme="auto"):
    """ptq.quantize_model of the tiny graph with its weights in a side file, streamed or through
    quantize_static; returns (the graph recorded with one side file, what the quantizer held, FP32 bytes)."""
    run = tmp_path / ("streamed" if stream else "static")
    prepared = _prepared_with_side_file(run)
    cfg = QuantizeConfig(profile=profile, scheme=scheme)
    plan = qgraph.analyse_graph(prepared, time_input="t")
    chosen = nodes if nodes is not None else select.select_nodes(plan, cfg)[0]
    reader = calibration_reader(tiny_feeds(6))
    cache = run / "calibration.json"
    assert ptq.calibrate(prepared, reader, cfg, cache)
    calls: list[bool] = []
    real = streamed.quantize_streamed

    def spy(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    with monkeypatch.context() as m:
        m.setattr(ptq, "quantize_streamed", spy)
        if not stream:
            m.setattr(ptq, "can_stream", lambda *a: False)
        held = HeldByQuantizer(m)
        out = run / "int8-0.onnx"
        ptq.quantize_model(prepared, out, reader, chosen, cfg, plan, calibration_cache=cache, weight_only=weight_only)
    assert calls == ([True] if stream else [])
    (tmp_path / f"{run.name}-recorded").mkdir()  # one name for both: the graph names its side file
    recorded = save_with_one_side_file(out, tmp_path / f"{run.name}-recorded" / "int8.onnx")
    return recorded, held.held, _external_bytes(prepared)


@pytest.mark.parametrize(
    "profile, scheme, nodes, weight_only",
    [
        ("cpu", "auto", None, ()),
        ("cpu", "u8s8-pair", None, ()),  # TensorQuantOverrides: ranges read from the weights themselves
        ("trt", "auto", None, ()),
        ("cpu", "auto", ["q_proj", "proj"], ["time_mlp", "ada_a"]),  # some float, some weight-only
    ],
    ids=["cpu", "cpu-pair", "trt", "subset-weight-only"],
)
def test_streamed_graph_is_quantize_statics_byte_for_byte(tmp_path, monkeypatch, profile, scheme, nodes, weight_only):
    a, _, _ = _quantize(tmp_path, monkeypatch, profile, True, nodes, weight_only, scheme)
    b, _, _ = _quantize(tmp_path, monkeypatch, profile, False, nodes, weight_only, scheme)
    assert a.read_bytes() == b.read_bytes()
    assert Path(f"{a}.data").read_bytes() == Path(f"{b}.data").read_bytes()
    assert any(n.op_type == "DequantizeLinear" for n in onnx.load(str(a)).graph.node)  # it quantized
    # Same numbers out of both (the files being equal, this checks the side file is read right).
    feed = tiny_feeds(1, seed=3)[0]
    ya = ort.InferenceSession(str(a), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    yb = ort.InferenceSession(str(b), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(ya, yb)


def test_the_streamed_quantizer_never_holds_the_fp32_weights(tmp_path, monkeypatch):
    _, streamed_held, fp32 = _quantize(tmp_path, monkeypatch, "cpu", True)
    _, static_held, _ = _quantize(tmp_path, monkeypatch, "cpu", False)
    assert len(streamed_held) == len(static_held) == 2
    # quantize_static: every FP32 weight in memory from the start, the INT8 ones beside them.
    assert static_held[0] >= fp32 and static_held[1] > static_held[0]
    # Streamed: the small inline tensors at the start; then the INT8 weights (1/4 of their FP32
    # bytes, with per-channel scales and zero points), never the FP32 ones.
    assert streamed_held[0] < fp32 / 4
    assert streamed_held[1] - streamed_held[0] < fp32 / 2


def test_streaming_applies_only_to_a_side_file_a_cache_and_one_folder(tmp_path, tiny_model):
    prepared = _prepared_with_side_file(tmp_path / "run")
    cache = tmp_path / "run" / "calibration.json"
    cache.write_text("{}")
    assert streamed.can_stream(prepared, prepared.with_name("int8.onnx"), cache)
    assert not streamed.can_stream(prepared, prepared.with_name("int8.onnx"), None)
    assert not streamed.can_stream(prepared, prepared.with_name("int8.onnx"), cache.with_name("missing.json"))
    assert not streamed.can_stream(prepared, tmp_path / "int8.onnx", cache)  # its float weights name the side file
    inline = shutil.copy(tiny_model, tmp_path / "run" / "inline.onnx")
    assert not streamed.can_stream(Path(inline), prepared.with_name("int8.onnx"), cache)


def _int8_of(fp32: Path, run: Path, old: bool, monkeypatch) -> Path:
    """The tiny graph prepared and quantized (cpu profile, its selection) in folder ``run``: as
    before (``quant_pre_process``, ``quantize_static``) or now (both from files); recorded."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    run.mkdir()
    prepared = run / "prepared.onnx"
    if old:
        quant_pre_process(
            str(fp32),
            str(prepared),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            external_data_location="prepared.onnx.data",
        )
    else:
        assert ptq.prepare_model(fp32, prepared)[1:] == (None, "quant_pre_process")
    cfg = QuantizeConfig()
    plan = qgraph.analyse_graph(prepared, time_input="t")
    reader = calibration_reader(tiny_feeds(6))
    assert ptq.calibrate(prepared, reader, cfg, run / "calibration.json")
    with monkeypatch.context() as m:
        if old:
            m.setattr(ptq, "can_stream", lambda *a: False)
        ptq.quantize_model(
            prepared, run / "int8.onnx", reader, select.select_nodes(plan, cfg)[0], cfg, plan, run / "calibration.json"
        )
    (run / "recorded").mkdir()
    return save_with_one_side_file(run / "int8.onnx", run / "recorded" / "int8.onnx")


def test_the_int8_graph_of_a_side_file_model_is_the_one_quantize_wrote_before(tmp_path, monkeypatch):
    """End to end, the tiny graph forced to external data: prepared and quantized from files
    (now) against quant_pre_process and quantize_static on the whole model (before)."""
    fp32 = _prepared_with_side_file(tmp_path / "fp32")
    before = _int8_of(fp32, tmp_path / "before", True, monkeypatch)
    now = _int8_of(fp32, tmp_path / "now", False, monkeypatch)
    assert now.read_bytes() == before.read_bytes()
    assert Path(f"{now}.data").read_bytes() == Path(f"{before}.data").read_bytes()


def test_the_weight_parameters_of_one_call_serve_the_next_with_other_ranges(tmp_path, monkeypatch):
    """--method auto writes minmax's all-INT8 graph, then percentile's: the same weights, nodes and
    settings, other activation ranges. The second call takes the first one's weight parameters
    (ORT's per-channel loop, 27 s of Sana-600M's 50 s, not run again) and writes the very graph it
    writes computing them itself; another node set computes its own. (The tiny graph's weights are
    per-channel: ``weight_params`` computes them, not ORT's loop.)"""
    prepared = _prepared_with_side_file(tmp_path / "run")
    plan = qgraph.analyse_graph(prepared, time_input="t")
    reader = calibration_reader(tiny_feeds(6))
    cfgs = {m: QuantizeConfig(method=m) for m in ("minmax", "percentile")}
    caches = {m: prepared.with_name(f"calibration-{m}.json") for m in cfgs}
    for m, cfg in cfgs.items():
        assert ptq.calibrate(prepared, reader, cfg, caches[m])
    nodes = select.select_nodes(plan, cfgs["minmax"])[0]
    computed: list[int] = []
    real = streamed._computed
    monkeypatch.setattr(streamed, "_computed", lambda *a: computed.append(1) or real(*a))
    from edgekit.quantize.cpu import weight_params

    whole: list[int] = []
    quantize_whole = weight_params.quantize_per_channel
    monkeypatch.setattr(weight_params, "quantize_per_channel", lambda *a: whole.append(1) or quantize_whole(*a))

    def write(name: str, method: str, chosen=nodes) -> tuple[Path, int]:
        before = len(computed)
        out = prepared.with_name(f"{name}.onnx")
        ptq.quantize_model(prepared, out, reader, chosen, cfgs[method], plan, calibration_cache=caches[method])
        return out, len(computed) - before

    monkeypatch.setattr(streamed._Remembered, "key", None)
    first, computed_first = write("minmax", "minmax")
    assert computed_first > 0 and whole  # the weights quantized over whole arrays too
    kept, again = write("percentile-kept", "percentile")
    assert kept.read_bytes() != first.read_bytes()  # other activation ranges: another graph
    assert again == 0  # the first call's parameters
    monkeypatch.setattr(streamed._Remembered, "key", None)
    fresh, computed_now = write("percentile-fresh", "percentile")
    assert computed_now > 0
    assert kept.read_bytes() == fresh.read_bytes()  # the tiny graph's INT8 weights are inline
    assert write("subset", "percentile", nodes[:2])[1] > 0  # another node set: its own parameters
