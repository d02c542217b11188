"""`edgekit loadtest` end to end on tiny models (random weights, vocab 8): the masked and the AR
token stage feed the chunk window graph; the document's structure, policies and errors. No
figure is asserted beyond counts: timing belongs in benchmarks/."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # three tiny exports and seven short load runs: about a minute on 2 cores

V, L, R = 8, 8, 2  # vocab, tokens per utterance, frames per token: 16 frames per utterance


def _specs():
    from edgekit.models.ar import ARConfig, ARStep, CausalTransformer
    from edgekit.models.flow import FlowConfig, FlowDecoder
    from edgekit.models.masked import MaskedConfig, MaskedTransformer
    from edgekit.spec import ModelSpec, TensorSpec
    from tests.tiny_models import _perturb

    fc = FlowConfig(channels=4, seq_len=L, frames_per_token=R, vocab_size=V, dim=16, depth=1, heads=2, time_freqs=8)
    flow = ModelSpec(
        name="tiny-flow", kind="flow", module=_perturb(FlowDecoder(fc), 0),
        inputs={"x": TensorSpec((1, fc.frames, 4), "float32", -3.0, 3.0), "t": TensorSpec((1,), "float32", 0.0, 1.0),
                "tokens": TensorSpec((1, L), "int64", 0, V + 1)},
        outputs={"v": TensorSpec((1, fc.frames, 4), "float32")},
        meta={"channels": 4, "frames": fc.frames, "frames_per_token": R, "conditioning": {"tokens": {"uncond": V}}},
        decode_defaults={"steps": 2, "solver": "midpoint", "grid": "cosine", "temperature": 1.0},
    )
    mc = MaskedConfig(vocab_size=V, seq_len=L, num_classes=3, dim=16, depth=1, heads=2, mlp_ratio=2)
    masked = ModelSpec(
        name="tiny-masked", kind="masked", module=_perturb(MaskedTransformer(mc), 1),
        inputs={"tokens": TensorSpec((1, L), "int64", 0, V + 1), "class_id": TensorSpec((1,), "int64", 0, 4)},
        outputs={"logits": TensorSpec((1, L, V), "float32")},
        meta={"vocab_size": V, "mask_id": V, "seq_len": L, "conditioning": {"class_id": {"uncond": 3}}},
        decode_defaults={"steps": 3, "schedule": "cosine", "choice_temperature": 4.5, "temperature": 1.0},
    )
    ac = ARConfig(vocab_size=V, max_len=L, num_classes=3, dim=16, depth=1, heads=2, mlp_ratio=2)
    cache = TensorSpec((ac.depth, 1, ac.heads, ac.max_len, ac.dim // ac.heads), "float32", -1.0, 1.0)
    ar = ModelSpec(
        name="tiny-ar", kind="ar", module=ARStep(_perturb(CausalTransformer(ac), 2)).eval(),
        inputs={"token": TensorSpec((1, 1), "int64", 0, V + 1), "pos": TensorSpec((1,), "int64", 0, L),
                "k_cache": cache, "v_cache": cache, "class_id": TensorSpec((1,), "int64", 0, 4)},
        outputs={"logits": TensorSpec((1, V), "float32"), "k_cache_out": cache, "v_cache_out": cache},
        meta={"vocab_size": V, "max_len": L, "bos_id": V, "num_classes": 3, "conditioning": {"class_id": {"uncond": 3}}},
        decode_defaults={"temperature": 1.0, "top_k": 0},
    )
    return flow, masked, ar


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    from edgekit.export import export_bundle, window_spec

    flow, masked, ar = _specs()
    root = tmp_path_factory.mktemp("stream")
    out = {
        "flow": export_bundle(window_spec(flow, 4, context=4), root / "flow-chunk").root,
        "masked": export_bundle(masked, root / "masked").root,
        "ar": export_bundle(ar, root / "ar").root,
    }
    # Class ids for the token stages (no demo evaluation set): a fixed class in every run.
    return out


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
    res = _cli("loadtest", bundles[tokens], bundles["flow"], "--streams", 2, "--deadline-ms", 20, "--duration-s", 0.2,
               "--steps", 2, "--threads", 1, "--cond", "class_id=1", "--arrivals", arrivals, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == "edgekit.loadtest/1" and set(doc["policies"]) == {"fixed", "adaptive"}
    assert doc["chunk"]["chunks_per_utterance"] == 4
    for name, r in doc["policies"].items():
        assert r["utterances"] >= 2 and r["chunks"] == 4 * r["utterances"]  # every utterance finished, every chunk recorded
        assert 0.0 <= r["deadline_miss_rate"] <= 1.0 and r["deadline_misses"] <= r["chunks"] - r["utterances"]
        assert r["time_to_first_chunk_ms"]["n"] == r["utterances"]
        assert sum(r["rungs_used"].values()) == r["chunks"]
        assert r["switches"] == len(doc["switch_log"][name])
    assert doc["policies"]["fixed"]["rungs_used"] == {"rk4x2": doc["policies"]["fixed"]["chunks"]}
    assert doc["policies"]["fixed"]["switches"] == 0
    assert {r["label"] for r in doc["ladder"]} >= {"rk4x2"} and doc["ladder"][-1]["label"] == "rk4x2"
    assert doc["rss"]["points"] and all("rss_growth_bytes" in r for r in doc["policies"].values())  # RSS over the run


def test_loadtest_writes_html(bundles, tmp_path):
    res = _cli("loadtest", bundles["masked"], bundles["flow"], "--policy", "adaptive", "--duration-s", 0.1,
               "--deadline-ms", 5, "--threads", 1, "--cond", "class_id=0", "--html", tmp_path / "r")
    assert res.exit_code == 0, res.output
    text = (tmp_path / "r" / "loadtest.html").read_text()
    assert "per policy" in text and "adaptive" in text


@pytest.mark.parametrize("args,code,needle", [
    (("--streams", 0), 2, "streams"),
    (("--policy", "greedy"), 2, "--policy"),
    (("--arrivals", "burst"), 2, "--arrivals"),
    (("--chunk-frames", 6), 2, "does not match"),
    (("--solver", "rk5"), 2, "rk5"),
])
def test_bad_options_are_one_line_usage_errors(bundles, args, code, needle):
    res = _cli("loadtest", bundles["masked"], bundles["flow"], *args, "--duration-s", 0.1, "--cond", "class_id=0")
    assert res.exit_code == code, res.output
    assert needle in res.output and "Traceback" not in res.output


def test_flow_bundle_without_a_window_graph_is_refused(bundles):
    res = _cli("loadtest", bundles["masked"], bundles["masked"], "--duration-s", 0.1, "--cond", "class_id=0")
    assert res.exit_code == 2 and "flow bundle" in res.output
