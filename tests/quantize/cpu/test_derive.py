"""Budget-search candidates derived from the all-INT8 graph (cpu/derive.py) are the graph
``quantize_model`` writes for the same node set: the same nodes, initializers and bytes, hence
the same outputs, bit for bit (no float rounding apart: the graphs are equal).

A tiny graph built here has what ORT's QDQ rewrite treats differently: a MatMul, a Gemm with
transB and a bias, a Conv whose output is quantized on the cpu profile and read by a float Relu
and an INT8 Conv, a tensor read by INT8 nodes and a float one, and a float node reading an INT8
node's output. The demo models' own graphs are checked the same way (slow)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from edgekit.quantize.config import QuantizeConfig

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from edgekit._sidefiles import external_data_locations, remove_model  # noqa: E402
from edgekit.quantize.calibrate import calibration_reader  # noqa: E402
from edgekit.quantize.cpu import candidates, derive, ptq, select  # noqa: E402
from edgekit.quantize.cpu.structure import qdq_structure  # noqa: E402
from edgekit.quantize.graph import analyse_graph  # noqa: E402
from edgekit.quantize.record import stage_model  # noqa: E402
from edgekit.runtimes.onnx_file import save_onnx  # noqa: E402


def build_graph(conv_output_is_graph_output: bool = False, width: int = 16):
    """img float[1,4,6,6] -> y float[36,8] (and c1 itself with ``conv_output_is_graph_output``)::

    c1 = Conv(img)  (3x3, bias)       r1 = Relu(c1) (float reader of a Conv output)
    c2 = Conv(c1)   (1x1, bias)       h = Reshape(r1 + c2) [36, 8]
    m = MatMul(h, Wm)   g = Gemm(h, Wg, bg, transB=1)   sh = Sigmoid(h) (float reader of h)
    y = Gemm(m + g, W2, b2) + sh      (m, g: [36, width])"""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [
        w("Wc1", 8, 4, 3, 3),
        w("bc1", 8),
        w("Wc2", 8, 8, 1, 1),
        w("bc2", 8),
        w("Wm", 8, width),
        w("Wg", width, 8),
        w("bg", width),
        w("W2", width, 8),
        w("b2", 8),
        numpy_helper.from_array(np.array([36, 8], dtype=np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Conv", ["img", "Wc1", "bc1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
        helper.make_node("Conv", ["c1", "Wc2", "bc2"], ["c2"], name="conv2"),
        helper.make_node("Add", ["r1", "c2"], ["s"], name="add_s"),
        helper.make_node("Reshape", ["s", "shape"], ["h"], name="flat"),
        helper.make_node("MatMul", ["h", "Wm"], ["m"], name="mm"),
        helper.make_node("Gemm", ["h", "Wg", "bg"], ["g"], name="gemm_t", transB=1),
        helper.make_node("Sigmoid", ["h"], ["sh"], name="sig"),
        helper.make_node("Add", ["m", "g"], ["a"], name="add_a"),
        helper.make_node("Gemm", ["a", "W2", "b2"], ["y1"], name="gemm"),
        helper.make_node("Add", ["y1", "sh"], ["y"], name="add_y"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [36, 8])]
    if conv_output_is_graph_output:
        outputs.append(helper.make_tensor_value_info("c1", TensorProto.FLOAT, [1, 8, 6, 6]))
    graph = helper.make_graph(
        nodes, "derive", [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 4, 6, 6])], outputs, inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def feeds(n: int = 6) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"img": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)} for _ in range(n)]


def canonical(path: Path) -> tuple:
    """The graph as a comparable value: nodes (name, op, inputs, outputs, attributes), in any
    order, and every initializer's name, type, shape and bytes (read from wherever it lives)."""
    m = onnx.load(str(path), load_external_data=False)
    nodes = sorted(
        (
            n.name,
            n.op_type,
            n.domain,
            tuple(n.input),
            tuple(n.output),
            tuple(a.SerializeToString() for a in n.attribute),
        )
        for n in m.graph.node
    )
    inits = {
        i.name: (i.data_type, tuple(i.dims), onnx.numpy_helper.to_array(i, base_dir=str(path.parent)).tobytes())
        for i in m.graph.initializer
    }
    return nodes, inits, [o.name for o in m.graph.output]


def outputs(path: Path, rows) -> list[list[np.ndarray]]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [session.run(None, f) for f in rows]


def structure(path: Path) -> dict:
    s = qdq_structure(path)
    return s | {"qdq": sorted(s["qdq"], key=lambda q: q["name"])}


class Setup:
    """A prepared graph, its calibration cache and its all-INT8 graph for ``profile``, in ``folder``."""

    def __init__(self, folder: Path, profile: str, model=None, external: bool = False):
        self.folder, self.cfg = folder, QuantizeConfig(profile=profile)
        self.prepared = save_onnx(model or build_graph(), folder / "prepared.onnx", external=external)
        self.plan = analyse_graph(self.prepared)
        self.selected, floated = select.select_nodes(self.plan, self.cfg)
        self.rule_wo = select.weight_only_by_rule(floated, self.cfg)
        self.cache = folder / "calibration.json"
        ptq.calibrate(self.prepared, calibration_reader(feeds()), self.cfg, self.cache)
        self.base = self.quantize(self.selected, (), folder / "all-int8.onnx")

    def weight_only(self, fallback: bool) -> list[str]:
        return self.rule_wo + (list(self.selected) if fallback else [])

    def quantize(self, nodes, weight_only, out: Path) -> Path:
        ptq.quantize_model(
            self.prepared,
            out,
            calibration_reader(feeds()),
            list(nodes),
            self.cfg,
            self.plan,
            calibration_cache=self.cache,
            weight_only=list(self.rule_wo) + list(weight_only),
        )
        return out

    def derive(self, nodes, weight_only, out: Path) -> bool:
        return derive.derive_candidate(
            self.prepared,
            self.base,
            out,
            nodes,
            self.selected,
            list(self.rule_wo) + list(weight_only),
            self.cfg.settings.quantized_outputs,
        )


def subsets(selected: list[str]) -> list[list[str]]:
    rng = random.Random(0)
    half = rng.sample(selected, len(selected) // 2)
    return [list(selected), [], selected[:1], selected[-1:], half, selected[1:]]


def assert_same_candidate(s: Setup, nodes, weight_only, tag: str) -> Path:
    ref = s.quantize(nodes, weight_only, s.folder / f"ref-{tag}.onnx")
    ours = s.folder / f"derived-{tag}.onnx"
    assert s.derive(nodes, weight_only, ours), tag
    assert canonical(ours) == canonical(ref), tag
    assert structure(ours) == structure(ref), tag
    rows = feeds(3)
    for a, b in zip(outputs(ours, rows), outputs(ref, rows)):
        for x, y in zip(a, b):
            assert np.array_equal(x, y), tag  # exactly: the graphs are equal
    return ours


@pytest.mark.parametrize("profile", ["cpu", "trt"])
def test_derived_candidates_are_the_graphs_quantize_model_writes(tmp_path, profile):
    s = Setup(tmp_path, profile)
    assert set(s.selected) == {"conv1", "conv2", "mm", "gemm_t", "gemm"}
    assert derive.derivation_blocker(s.prepared, s.base, s.selected, s.cfg.settings.quantized_outputs) is None
    for i, nodes in enumerate(subsets(s.selected)):
        for fallback in (False, True):  # fully float, and weight-only (the trt profile's form)
            wo = [n for n in s.selected if n not in nodes] if fallback else []
            ours = assert_same_candidate(s, nodes, wo, f"{i}-{fallback}")
            st = qdq_structure(ours)
            assert set(st["quantized_nodes"]) >= set(nodes)
            if fallback:
                # (a float conv2 reading conv1's quantized output counts as quantized there)
                assert set(st["weight_only_nodes"]) == set(wo) - set(st["quantized_nodes"])


def test_the_cpu_profile_keeps_a_conv_output_quantized_for_its_float_reader(tmp_path):
    """conv1 INT8, conv2 float: the float Relu and conv2 read conv1's dequantized output (its Q is
    there for them); conv1 float, conv2 INT8: the Relu reads the float tensor, conv2 the DQ."""
    s = Setup(tmp_path, "cpu")
    readers = {}
    for nodes in (["conv1"], ["conv2"]):
        path = assert_same_candidate(s, nodes, [], nodes[0])
        graph = onnx.load(str(path), load_external_data=False).graph
        readers[nodes[0]] = {n.name: n.input[0] for n in graph.node if n.name in ("relu", "conv2")}
    assert readers["conv1"] == {"relu": "c1_DequantizeLinear_Output", "conv2": "c1_DequantizeLinear_Output"}
    assert readers["conv2"] == {"relu": "c1", "conv2": "c1_DequantizeLinear_Output"}


def test_a_weight_only_weight_scaled_otherwise_is_quantized_again(tmp_path):
    """The avx2 scheme bounds weight pairs (a scale ``_weight_only`` does not compute): its
    weight-only fallbacks are not derived, the writer runs ``quantize_model`` for them."""
    s = Setup(tmp_path, "cpu")
    s.cfg = QuantizeConfig(profile="cpu", scheme="u8s8-pair")
    s.base = s.quantize(s.selected, (), tmp_path / "all-int8-pair.onnx")
    assert s.derive(s.selected[1:], [], tmp_path / "float.onnx")  # fully float: derived
    assert not s.derive(s.selected[1:], s.selected[:1], tmp_path / "wo.onnx")
    assert not (tmp_path / "wo.onnx").exists()


def test_graphs_it_cannot_derive_are_named_and_written_by_the_quantizer(tmp_path):
    s = Setup(tmp_path, "cpu", model=build_graph(conv_output_is_graph_output=True))
    why = derive.derivation_blocker(s.prepared, s.base, s.selected, s.cfg.settings.quantized_outputs)
    assert why is not None and "graph output 'c1'" in why
    names = iter(range(100))
    writer = candidates.CandidateWriter(
        s.prepared, s.cfg, s.plan, s.selected, lambda p: tmp_path / f"{p}-{next(names)}.onnx"
    )
    path = writer.write(s.selected[:2], s.rule_wo, calibration_reader(feeds()), s.cache)
    ref = s.quantize(s.selected[:2], (), tmp_path / "ref.onnx")
    assert canonical(path) == canonical(ref)
    assert writer.to_json() == {"derived": 0, "quantize_static": 2, "not_derived_because": why}


def test_the_writer_quantizes_once_and_derives_the_rest(tmp_path):
    s = Setup(tmp_path, "trt")
    names = iter(range(100))
    writer = candidates.CandidateWriter(
        s.prepared, s.cfg, s.plan, s.selected, lambda p: tmp_path / f"{p}-{next(names)}.onnx"
    )
    made = [
        writer.write(nodes, s.weight_only(True), calibration_reader(feeds()), s.cache) for nodes in subsets(s.selected)
    ]
    assert writer.to_json() == {"derived": len(made), "quantize_static": 1, "not_derived_because": None}
    assert len(set(made)) == len(made) and all(p.name.startswith("int8-") for p in made)
    # A node set outside the selected one (none of the search's): the quantizer.
    writer.write(["sig"], s.weight_only(False), calibration_reader(feeds()), s.cache)
    assert writer.to_json()["quantize_static"] == 2


def test_a_derived_candidate_names_the_side_files_it_reads_and_owns_none(tmp_path, monkeypatch):
    """Weights in side files (as over 2 GB): the candidate is a graph file that reads the INT8
    weights from the all-INT8 graph's side file and the float ones from the prepared model's; it
    opens and runs; deleting it leaves both; staged into a bundle it gets one side file of its
    own, copied tensor by tensor (no load of the whole model)."""
    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", "0")
    s = Setup(tmp_path, "cpu", model=build_graph(width=256), external=True)  # INT8 weights over 1 KiB
    base_data, prepared_data = tmp_path / "all-int8.onnx.data", tmp_path / "prepared.onnx.data"
    assert external_data_locations(s.base) == {base_data.name}
    nodes = s.selected[2:]
    ours = assert_same_candidate(s, nodes, [], "external")
    assert external_data_locations(ours) == {base_data.name, prepared_data.name}
    graph_bytes = ours.stat().st_size
    assert graph_bytes < prepared_data.stat().st_size / 2  # the graph; its weights stay in their files

    staged_dir = tmp_path / "bundle"
    staged_dir.mkdir()
    real_load = onnx.load

    def graph_only(path, *args, **kwargs):
        assert kwargs.get("load_external_data") is False, "staging loaded every weight into memory"
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(onnx, "load", graph_only)
    sides = stage_model(ours, staged_dir / "int8.onnx")
    monkeypatch.setattr(onnx, "load", real_load)
    assert len(sides) == 1 and sides[0].parent == staged_dir
    assert external_data_locations(staged_dir / "int8.onnx") == {sides[0].name}
    assert canonical(staged_dir / "int8.onnx")[1] == canonical(ours)[1]

    remove_model(ours)
    assert not ours.exists() and base_data.is_file() and prepared_data.is_file()
    rows = feeds(2)
    assert outputs(s.base, rows)  # the all-INT8 graph still reads its side file
    own = s.quantize(nodes, [], tmp_path / "own.onnx")  # a quantize_model candidate has its own side file
    assert (tmp_path / "own.onnx.data").is_file()
    remove_model(own)
    assert not (tmp_path / "own.onnx.data").exists() and prepared_data.is_file()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["masked", "flow", "ar"])
@pytest.mark.parametrize("profile", ["cpu", "trt"])
def test_derived_candidates_of_the_demo_graphs_are_the_quantizers(demo_bundles, tmp_path, kind, profile):
    from edgekit.bundle import Bundle
    from edgekit.quantize.calibrate import record_trajectories
    from edgekit.runtimes.ort import OrtRuntime

    bundle = Bundle.load(demo_bundles[kind])
    with OrtRuntime(bundle.path_of("fp32")) as rt:
        traj = record_trajectories(bundle, rt, 2, 1000)
    rows = traj.feeds[:: max(1, len(traj.feeds) // 6)]
    cfg = QuantizeConfig(profile=profile)
    prepared, _, _ = ptq.prepare_model(Path(bundle.path_of("fp32")), tmp_path / "prepared.onnx")
    plan = analyse_graph(prepared)
    selected, floated = select.select_nodes(plan, cfg)
    rule_wo = select.weight_only_by_rule(floated, cfg)
    cache = tmp_path / "calibration.json"
    ptq.calibrate(prepared, calibration_reader(rows), cfg, cache)

    def quantize(nodes, wo, out):
        ptq.quantize_model(prepared, out, calibration_reader(rows), nodes, cfg, plan, cache, weight_only=rule_wo + wo)
        return out

    base = quantize(selected, [], tmp_path / "all-int8.onnx")
    assert derive.derivation_blocker(prepared, base, selected, cfg.settings.quantized_outputs) is None
    for i, nodes in enumerate(subsets(selected)):
        wo = [n for n in selected if n not in nodes] if i % 2 else []
        ref = quantize(nodes, wo, tmp_path / f"ref-{i}.onnx")
        ours = tmp_path / f"derived-{i}.onnx"
        assert derive.derive_candidate(
            prepared, base, ours, nodes, selected, rule_wo + wo, cfg.settings.quantized_outputs
        )
        assert canonical(ours) == canonical(ref), i
        for a, b in zip(outputs(ours, rows[:2]), outputs(ref, rows[:2])):
            assert all(np.array_equal(x, y) for x, y in zip(a, b)), i


def test_a_graph_with_unnamed_nodes_is_named_when_prepared_and_derives(tmp_path):
    """onnx inlines a function's nodes unnamed (F5-TTS's Mish: 6 nodes named ""): every fallback
    candidate then ran ORT's quantizer (17 s each at size). Prepared, every node has a name of its
    own, the names it had are kept, and candidates derive."""
    import onnx

    model = build_graph()
    for node in model.graph.node:
        if node.op_type in ("Relu", "Sigmoid"):
            node.name = ""
    fp32 = save_onnx(model, tmp_path / "fp32.onnx")
    as_named, _, _ = ptq.prepare_model(save_onnx(build_graph(), tmp_path / "named.onnx"), tmp_path / "p0.onnx")
    kept = {n.name for n in onnx.load(str(as_named)).graph.node if n.op_type not in ("Relu", "Sigmoid")}
    prepared, _, _ = ptq.prepare_model(fp32, tmp_path / "prepared.onnx")
    names = [n.name for n in onnx.load(str(prepared)).graph.node]
    assert "" not in names and len(names) == len(set(names)), names
    assert kept <= set(names)  # the names the graph had stay
    cfg = QuantizeConfig()
    plan = analyse_graph(prepared)
    selected, floated = select.select_nodes(plan, cfg)
    assert len(selected) == 5
    base = tmp_path / "all-int8.onnx"
    ptq.quantize_model(
        prepared, base, calibration_reader(feeds()), selected, cfg, plan, calibration_cache=tmp_path / "cache.json"
    )
    assert derive.derivation_blocker(prepared, base, selected, cfg.settings.quantized_outputs) is None


def test_a_float_attention_scores_candidate_is_the_quantizers(tiny_model, tmp_path):
    """OpenVINO's int8 QKᵀ (symmetric int8 Q/DQ on both activations, ``tensor_overrides.attention_score_overrides``)
    is a budget fallback like any node: the candidate that floats it, derived from the all-INT8
    graph, is the graph the quantizer writes without it (its Q/DQ gone, the float tensors read)."""
    from tests.quantize.conftest import tiny_feeds

    cfg = QuantizeConfig(attention_scores="int8")
    prepared = Path(tmp_path / "tiny.onnx")
    prepared.write_bytes(Path(tiny_model).read_bytes())
    plan = analyse_graph(prepared, time_input="t")
    selected, floated = select.select_nodes(plan, cfg)
    assert "qk" in selected
    rule_wo = select.weight_only_by_rule(floated, cfg)
    rows = tiny_feeds(6)
    cache = tmp_path / "calibration.json"
    ptq.calibrate(prepared, calibration_reader(rows), cfg, cache)

    def quantize(nodes, out):
        ptq.quantize_model(prepared, out, calibration_reader(rows), nodes, cfg, plan, cache, weight_only=rule_wo)
        return out

    base = quantize(selected, tmp_path / "all-int8.onnx")
    assert derive.derivation_blocker(prepared, base, selected, cfg.settings.quantized_outputs) is None
    for drop in (["qk"], ["qk", "q_proj"], ["k_proj"]):
        nodes = [n for n in selected if n not in drop]
        ref = quantize(nodes, tmp_path / f"ref-{'-'.join(drop)}.onnx")
        ours = tmp_path / f"derived-{'-'.join(drop)}.onnx"
        assert derive.derive_candidate(prepared, base, ours, nodes, selected, rule_wo, cfg.settings.quantized_outputs)
        assert canonical(ours) == canonical(ref), drop
    assert not {"q", "kT"} & {q["input"] for q in qdq_structure(tmp_path / "derived-qk.onnx")["qdq"]}
