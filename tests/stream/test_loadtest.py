"""`edgekit loadtest` end to end on tiny models (random weights, vocab 8, ``tiny_stream``): the
masked and the AR token stage feed the chunk window graph on ORT, torch, OpenVINO and QNN; the
document's structure, policies and errors. No figure is asserted beyond counts: timing belongs
in benchmarks/."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # three tiny exports and seven short load runs: about a minute on 2 cores

SOURCE = "tests.stream.tiny_stream"  # the factories, so the torch runtime can rebuild the modules


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    from edgekit.export import export_bundle, window_spec
    from tests.stream import tiny_stream

    root = tmp_path_factory.mktemp("stream")
    return {
        "flow": export_bundle(
            window_spec(tiny_stream.flow(), 4, context=4), root / "flow-chunk", source=f"{SOURCE}:flow"
        ).root,
        "masked": export_bundle(tiny_stream.masked(), root / "masked", source=f"{SOURCE}:masked").root,
        "ar": export_bundle(tiny_stream.ar(), root / "ar", source=f"{SOURCE}:ar").root,
    }


def _cli(*args):
    from edgekit.cli import app

    return CliRunner().invoke(app, list(map(str, args)))


def test_window_bundle_records_its_geometry(bundles):
    from edgekit.bundle import Bundle

    b = Bundle.load(bundles["flow"])
    assert b.meta["chunk"] == {"frames": 4, "context": 4, "lookahead": 0, "tokens_input": "tokens", "sigma_min": 1e-4}
    assert b.meta["frames"] == 8 and b.meta["utterance_frames"] == 16
    assert b.inputs["x"].shape == (1, 8, 4) and b.inputs["tokens"].shape == (1, 4)


@pytest.mark.parametrize("tokens,arrivals", [("masked", "all"), ("ar", "poisson")])
def test_loadtest_json_reports_every_policy(bundles, tokens, arrivals):
    res = _cli(
        "loadtest",
        bundles[tokens],
        bundles["flow"],
        "--streams",
        2,
        "--deadline-ms",
        20,
        "--duration-s",
        0.2,
        "--steps",
        2,
        "--threads",
        1,
        "--cond",
        "class_id=1",
        "--arrivals",
        arrivals,
        "--json",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == "edgekit.loadtest/1" and set(doc["policies"]) == {"fixed", "adaptive"}
    assert doc["chunk"]["chunks_per_utterance"] == 4
    for name, r in doc["policies"].items():
        assert (
            r["utterances"] >= 2 and r["chunks"] == 4 * r["utterances"]
        )  # every utterance finished, every chunk recorded
        assert 0.0 <= r["deadline_miss_rate"] <= 1.0 and r["deadline_misses"] <= r["chunks"] - r["utterances"]
        assert r["time_to_first_chunk_ms"]["n"] == r["utterances"]
        assert sum(r["rungs_used"].values()) == r["chunks"]
        assert r["switches"] == len(doc["switch_log"][name])
        assert (
            list(r["by_chunk"]) == ["0", "1", "2", "3"] and r["by_chunk"]["0"]["misses"] == 0
        )  # the first has no deadline
        assert sum(c["misses"] for c in r["by_chunk"].values()) == r["deadline_misses"]
        assert r["first_chunk_ms"]["tokens_wait"]["n"] == r["first_chunk_ms"]["decode"]["n"] == r["utterances"]
    assert doc["policies"]["fixed"]["rungs_used"] == {"rk4x2": doc["policies"]["fixed"]["chunks"]}
    assert doc["policies"]["fixed"]["switches"] == 0
    assert {r["label"] for r in doc["ladder"]} >= {"rk4x2"} and doc["ladder"][-1]["label"] == "rk4x2"
    assert doc["rss"]["points"] and all("rss_growth_bytes" in r for r in doc["policies"].values())  # RSS over the run


def test_loadtest_writes_html(bundles, tmp_path):
    res = _cli(
        "loadtest",
        bundles["masked"],
        bundles["flow"],
        "--policy",
        "adaptive",
        "--duration-s",
        0.1,
        "--deadline-ms",
        5,
        "--threads",
        1,
        "--cond",
        "class_id=0",
        "--html",
        tmp_path / "r",
    )
    assert res.exit_code == 0, res.output
    text = (tmp_path / "r" / "loadtest.html").read_text()
    assert "per policy" in text and "adaptive" in text


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (("--streams", 0), 2, "streams"),
        (("--policy", "greedy"), 2, "--policy"),
        (("--arrivals", "burst"), 2, "--arrivals"),
        (("--chunk-frames", 6), 2, "does not match"),
        (("--solver", "rk5"), 2, "rk5"),
    ],
)
def test_bad_options_are_one_line_usage_errors(bundles, args, code, needle):
    res = _cli("loadtest", bundles["masked"], bundles["flow"], *args, "--duration-s", 0.1, "--cond", "class_id=0")
    assert res.exit_code == code, res.output
    assert needle in res.output and "Traceback" not in res.output


def test_flow_bundle_without_a_window_graph_is_refused(bundles):
    res = _cli("loadtest", bundles["masked"], bundles["masked"], "--duration-s", 0.1, "--cond", "class_id=0")
    assert res.exit_code == 2 and "flow bundle" in res.output


@pytest.mark.parametrize(
    "runtime,precision,dep",
    [
        ("torch", "fp32", "torch"),  # the module rebuilt from its source at the window's frame count
        ("openvino", "fp32", "openvino"),
        ("qnn", "fp16", "onnxruntime_qnn"),  # HTP emulation: both graphs in float16 (the NPU has no fp32)
    ],
)
def test_loadtest_runs_on_every_runtime_of_a_flow_bundle(bundles, runtime, precision, dep):
    pytest.importorskip(dep)
    res = _cli(
        "loadtest",
        bundles["masked"],
        bundles["flow"],
        "--runtime",
        runtime,
        "--precision",
        precision,
        "--policy",
        "fixed",
        "--steps",
        1,
        "--duration-s",
        0.05,
        "--threads",
        1,
        "--cond",
        "class_id=1",
        "--json",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["runtime"]["name"] == runtime and doc["runtime"]["precision"] == precision
    assert doc["runtime"]["tokens_precision"] == ("fp16" if runtime == "qnn" else "fp32")
    r = doc["policies"]["fixed"]
    assert r["utterances"] >= 1 and r["chunks"] == 4 * r["utterances"] and r["rungs_used"] == {"rk4x1": r["chunks"]}


def test_qnn_int8_loadtest_runs_the_qnn_profile_window_graph(bundles, tmp_path):
    """The window bundle quantized with `quantize --profile qnn` runs int8 on the HTP (tokens fp16);
    before that, --precision int8 is one error naming the quantize command."""
    pytest.importorskip("onnxruntime_qnn")
    import shutil

    from edgekit.quantize import QuantizeConfig, quantize_bundle

    flow = shutil.copytree(bundles["flow"], tmp_path / "flow-chunk")
    args = (
        "--runtime",
        "qnn",
        "--precision",
        "int8",
        "--policy",
        "fixed",
        "--steps",
        1,
        "--duration-s",
        0.05,
        "--threads",
        1,
        "--cond",
        "class_id=1",
    )
    res = _cli("loadtest", bundles["masked"], flow, *args)
    assert res.exit_code == 1 and "quantize" in res.output and "Traceback" not in res.output
    # random weights: the budget is what 8 bits reach here (as tests/conftest.py's qnn fixture)
    quantize_bundle(flow, QuantizeConfig(profile="qnn", calib_samples=2, eval_samples=2, budget={"snr_db": 10.0}))
    res = _cli("loadtest", bundles["masked"], flow, *args, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["runtime"]["precision"] == "int8" and "HTP" in doc["runtime"]["device"]
    assert doc["policies"]["fixed"]["chunks"] == 4 * doc["policies"]["fixed"]["utterances"] >= 4
