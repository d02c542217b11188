"""Embedding tables stored int8 with one scale per row (cpu/tables.py): the graph it writes, the
rows it gathers, the bytes it saves, which tables it leaves float, and the same through a whole
quantize run (the budget decodes the int8 table; --exclude keeps one float)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgekit.quantize.config import QuantizeConfig

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from edgekit.quantize import graph as qgraph  # noqa: E402
from edgekit.quantize.cpu import select, tables  # noqa: E402

V, D = 300, 64  # a 76.8 KB table: over tables.MIN_TABLE_BYTES


def build_embedding_model(path: Path, tied: bool = False, external: bool = False) -> Path:
    """tokens int64[2,8] -> emb = Gather(table[V,D], tokens) (also a graph output, to compare rows),
    y = emb·W; a small class table [4, D] (1 KB: under the threshold) added in. ``tied``: a second
    graph whose table is also read (transposed) by the output projection, as tied embeddings are."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    table = (rng.standard_normal((V, D)) * rng.uniform(0.01, 3.0, (V, 1))).astype(np.float32)  # rows 300x apart
    inits = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(rng.standard_normal((4, D)).astype(np.float32), "cls_table"),
        numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32) * 0.1, "W"),
    ]
    nodes = [
        helper.make_node("Gather", ["table", "tokens"], ["emb"], name="embed", axis=0),
        helper.make_node("Gather", ["cls_table", "cls"], ["c"], name="cls_embed"),
        helper.make_node("Unsqueeze", ["c", "one"], ["c1"], name="cls_unsq"),
        helper.make_node("Add", ["emb", "c1"], ["h"], name="add"),
        helper.make_node("MatMul", ["h", "W"], ["y"], name="proj"),
    ]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "one"))
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, D]),
        helper.make_tensor_value_info("emb", TensorProto.FLOAT, [2, 8, D]),
    ]
    if tied:
        nodes += [
            helper.make_node("Transpose", ["table"], ["tableT"], name="tie_t", perm=[1, 0]),
            helper.make_node("MatMul", ["y", "tableT"], ["logits"], name="head"),
        ]
        outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 8, V]))
    graph = helper.make_graph(
        nodes,
        "emb",
        [
            helper.make_tensor_value_info("tokens", TensorProto.INT64, [2, 8]),
            helper.make_tensor_value_info("cls", TensorProto.INT64, [2]),
        ],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save_model(model, str(path))
    return path


def _feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"tokens": rng.integers(0, V, (2, 8)).astype(np.int64), "cls": np.array([0, 3], np.int64)}


def _run(path: Path) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, _feeds())))


def _size(path: Path) -> int:
    side = path.with_name(path.name + ".data")
    return path.stat().st_size + (side.stat().st_size if side.exists() else 0)


def test_plan_finds_the_tables_a_gather_alone_reads(tmp_path):
    plan = qgraph.analyse_graph(build_embedding_model(tmp_path / "m.onnx"))
    assert {n.name: n.table for n in plan.nodes if n.table} == {"embed": (V, D), "cls_embed": (4, D)}
    tied = qgraph.analyse_graph(build_embedding_model(tmp_path / "tied.onnx", tied=True))
    # A table the output projection reads too is that MatMul's weight: no table of its own.
    assert {n.name for n in tied.nodes if n.table} == {"cls_embed"}


def test_selection_threshold_exclude_override_and_profile(tmp_path):
    plan = qgraph.analyse_graph(build_embedding_model(tmp_path / "m.onnx"))
    chosen, kept = select.select_tables(plan, QuantizeConfig())
    assert chosen == ["embed"]
    assert "under 16384 B" in kept["cls_embed"]  # 1 KB: stays float
    chosen, kept = select.select_tables(plan, QuantizeConfig(exclude=("embed",)))
    assert chosen == [] and kept["embed"] == "excluded by --exclude embed"
    override = {"node": "embed", "action": "float", "reason": "debug"}
    assert select.select_tables(plan, QuantizeConfig(overrides=(override,)))[0] == []
    chosen, kept = select.select_tables(plan, QuantizeConfig(profile="trt"))
    assert chosen == [] and "trt profile keeps embedding tables float" in kept["embed"]


@pytest.mark.parametrize("external", [False, True])
def test_int8_table_rows_within_one_step_and_no_float_copy(tmp_path, external):
    fp32 = build_embedding_model(tmp_path / "m.onnx", external=external)
    int8 = tmp_path / "q.onnx"
    shutil.copyfile(fp32, int8)
    if external:
        shutil.copyfile(tmp_path / "m.onnx.data", tmp_path / "q.onnx.data")
    assert sorted(tables.store_tables_int8(int8, ["embed", "cls_embed"])) == ["cls_embed", "embed"]
    model = onnx.load(str(int8), load_external_data=False)
    inits = {i.name: i for i in model.graph.initializer}
    assert "table" not in inits and "cls_table" not in inits  # no float copy left in the graph
    assert inits["table_int8"].data_type == onnx.TensorProto.INT8 and list(inits["table_int8"].dims) == [V, D]
    assert list(inits["table_row_scale"].dims) == [V, 1]  # one scale per row
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Gather") == 4 and ops.count("Cast") == 2 and "DequantizeLinear" not in ops
    # The gathered rows: each element within half an int8 step of its row (the scale the file holds).
    table = onnx.numpy_helper.to_array(onnx.load(str(fp32)).graph.initializer[0])  # its weights read from beside it
    scale = onnx.numpy_helper.to_array(inits["table_row_scale"], str(tmp_path))
    got, want = _run(int8), _run(fp32)
    tokens = _feeds()["tokens"]
    assert np.all(np.abs(got["emb"] - want["emb"]) <= scale[tokens] / 2 * (1 + 1e-5))
    assert np.array_equal(want["emb"], table[tokens])
    snr = 10 * np.log10(np.sum(want["emb"] ** 2) / np.sum((got["emb"] - want["emb"]) ** 2))
    assert snr > 40, snr
    # ~3/4 of the table's bytes are gone (less 4 bytes of scale per row). A side file keeps the
    # dead FP32 bytes until the bundle stores the model (record.stage_model copies what is read).
    if external:
        from edgekit.runtimes.onnx_file import save_with_one_side_file

        (tmp_path / "stored").mkdir()
        int8 = save_with_one_side_file(int8, tmp_path / "stored" / "q.onnx")
    saved = _size(fp32) - _size(int8)
    expected = V * D * 3 - 4 * V + 4 * D * 3 - 4 * 4
    assert abs(saved - expected) < 2048, (saved, expected)


def test_a_table_another_node_reads_stays_float(tmp_path):
    path = build_embedding_model(tmp_path / "tied.onnx", tied=True)
    before = path.read_bytes()
    assert tables.store_tables_int8(path, ["embed"]) == []  # the head MatMul reads it too
    assert path.read_bytes() == before
    # Listed Gathers whose table is not read by them alone: only those tables that are.
    assert tables.store_tables_int8(path, ["embed", "cls_embed"]) == ["cls_embed"]


def test_openvino_runs_the_int8_table(tmp_path):
    ov = pytest.importorskip("openvino")
    fp32 = build_embedding_model(tmp_path / "m.onnx")
    int8 = tmp_path / "q.onnx"
    shutil.copyfile(fp32, int8)
    tables.store_tables_int8(int8, ["embed"])
    compiled = ov.Core().compile_model(str(int8), "CPU")
    got = compiled(_feeds())
    emb = got[compiled.output("emb")]
    want = _run(fp32)["emb"]
    assert np.allclose(emb, _run(int8)["emb"], atol=1e-6)
    assert np.max(np.abs(emb - want)) < np.max(np.abs(want)) / 127


def test_quantize_writes_and_budgets_int8_tables_and_exclude_keeps_one_float(tiny_bundles, tmp_path, monkeypatch):
    """The tiny masked model (token table 18 x 16, class table 4 x 16) with the threshold at
    512 B: the token table is int8 in every candidate the budget decodes and in the artifact, the
    summary says so (and why the class table stayed float); --exclude by module path keeps it float."""
    from edgekit.bundle import Bundle
    from edgekit.quantize import quantize_bundle
    from edgekit.quantize.cpu import fallback

    monkeypatch.setattr(tables, "MIN_TABLE_BYTES", 512)
    decoded: list[set[str]] = []
    real = fallback.FallbackProfile.budget_runtime

    def budget_runtime(self, model, **kw):
        decoded.append(set(tables.int8_tables(onnx.load(str(model), load_external_data=False))))
        return real(self, model, **kw)

    monkeypatch.setattr(fallback.FallbackProfile, "budget_runtime", budget_runtime)
    loose = {"check_margin": -100.0, "lockstep_token_agreement": 0.0, "event_accuracy_drop": 1.0}
    cfg = QuantizeConfig(calib_samples=2, eval_samples=2, isa="avx2", fallback=False, budget=loose)
    root = Path(shutil.copytree(tiny_bundles["masked"], tmp_path / "masked"))
    s = quantize_bundle(root, cfg)
    g = s["gather_tables"]
    assert len(g["int8"]) == 1 and [row["shape"][0] for row in g["float"]] == [4], g
    token = g["int8"][0]
    assert "under 512 B" in g["float"][0]["reason"]
    assert decoded and all(d == {token["node"]} for d in decoded)  # the budget judged the int8 table
    model = onnx.load(str(Bundle.load(root).path_of("int8")))
    floats = [i for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT]
    assert not [i.name for i in floats if list(i.dims) == token["shape"]]  # no float copy of the table
    assert token["int8_bytes"] < token["fp32_bytes"] / 3
    w = s["weights"]
    assert 0 < w["int8_share"] < 1 and w["values"]["int8"] >= token["shape"][0] * token["shape"][1]
    # inspect's record and debug read the model as written: the token lookup's output carries the
    # int8 rows' rounding (finite SQNR, far above the MatMuls'), the float class lookup none.
    from edgekit.debug import DebugConfig, debug_bundle
    from edgekit.int8_match import int8_match

    bundle = Bundle.load(root)
    assert int8_match(bundle).status == "matches" and bundle.quantization.int8_tables == (token["label"],)
    fp32 = onnx.load(str(bundle.path_of("fp32")))
    out = {n.name: n.output[0] for n in fp32.graph.node}
    doc = debug_bundle(root, DebugConfig())
    first = dict(zip(doc["sqnr"]["tensors"], doc["sqnr"]["per_step"][0]))
    assert 40 < first[out[token["node"]]] < 80 and first[out[g["float"][0]["node"]]] == float("inf")
    # The same run with the table excluded by its torch module path: float, and said so.
    excluded = Path(shutil.copytree(tiny_bundles["masked"], tmp_path / "excluded"))
    s2 = quantize_bundle(excluded, dataclasses.replace(cfg, exclude=(token["label"],)))
    assert s2["gather_tables"]["int8"] == []
    reasons = {row["node"]: row["reason"] for row in s2["gather_tables"]["float"]}
    assert reasons[token["node"]] == f"excluded by --exclude {token['label']}"
    assert s2["weights"]["values"]["int8"] < w["values"]["int8"]


def test_quantize_with_weights_in_a_side_file_stores_the_int8_table_there(tiny_bundles, tmp_path, monkeypatch):
    """As a model over 2 GB goes (EDGEKIT_EXTERNAL_DATA_MB=0): the streamed quantizer's candidates
    name side files; the int8 table goes to the candidate's own, and the bundle's one side file
    holds the int8 table and no FP32 copy of it."""
    torch = pytest.importorskip("torch")
    from edgekit.bundle import Bundle
    from edgekit.export.to_bundle import export_bundle
    from edgekit.quantize import quantize_bundle
    from tests.tiny_models import tiny_masked_spec

    monkeypatch.setattr(tables, "MIN_TABLE_BYTES", 512)
    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", "0")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        spec = tiny_masked_spec()
    root = export_bundle(spec, tmp_path / "external", source=spec.name).root
    loose = {"check_margin": -100.0, "lockstep_token_agreement": 0.0, "event_accuracy_drop": 1.0}
    s = quantize_bundle(root, QuantizeConfig(calib_samples=2, eval_samples=2, isa="avx2", fallback=False, budget=loose))
    token = s["gather_tables"]["int8"][0]
    bundle = Bundle.load(root)  # every side file listed and hashed
    model = onnx.load(str(bundle.path_of("int8")))  # with its weights, from beside it
    by_name = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    q = by_name[next(n.input[0] for n in model.graph.node if n.name == token["node"])]
    assert q.dtype == np.int8 and list(q.shape) == token["shape"]
    # The FP32 table's bytes are in no file of the int8 artifact (ORT's quantizer had written them
    # to the candidate's side file: the bundle stores only what the graph reads).
    fp32 = onnx.load(str(bundle.path_of("fp32")))
    table = next(i for i in fp32.graph.initializer if list(i.dims) == token["shape"])
    raw = onnx.numpy_helper.to_array(table).tobytes()
    files = [root / f["path"] for f in s["int8_files"]["int8"]]
    assert all(raw not in f.read_bytes() for f in files)
