"""Fused graphs (export/fused.py + decode/fused.py) against the host loops on tiny models."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.decode import FlowDecodeConfig, MaskedDecodeConfig, decode_flow, decode_masked
from edgekit.errors import UsageError

pytest.importorskip("torch")

FLOW_TOKENS = np.array([[1, 2, 3, 4], [5, 6, 7, 0]])
CLASSES = np.array([0, 2])


def _torch_fused(spec, graph, opts):
    """(TorchRuntime over the fused wrapper, manifest-like entry) without an ONNX export."""
    from edgekit.export.fused import BAKED, fused_module
    from edgekit.runtimes.torch_ref import TorchRuntime

    module, inputs, outputs = fused_module(spec, graph, opts)
    defaults = {"spacing": 0}  # a decode option the fused graphs bake with its config default
    entry = {
        "graph": graph,
        "baked": {k: opts.get(k, defaults.get(k)) for k in BAKED[(spec.kind, graph)]},
        "mask_id": spec.meta.get("mask_id"),
    }
    return TorchRuntime(module, inputs, outputs), entry


def _host(spec):
    from edgekit.runtimes.torch_ref import TorchRuntime

    return TorchRuntime(spec.module, spec.inputs, spec.outputs)


@pytest.mark.parametrize("solver", ["euler", "midpoint", "heun", "rk4"])
@pytest.mark.parametrize("guidance", [1.0, 2.0])
def test_flow_step_wrapper_matches_host_loop(tiny_specs, solver, guidance):
    from edgekit.decode.fused import decode_flow_fused

    spec = tiny_specs["flow"]
    cfg = FlowDecodeConfig(steps=3, solver=solver, grid="cosine", guidance=guidance, seed=4)
    rt, entry = _torch_fused(spec, "step", {"solver": solver, "guidance": guidance})
    fused = decode_flow_fused(rt, entry, {"tokens": FLOW_TOKENS}, cfg)
    host = decode_flow(_host(spec), spec.meta, {"tokens": FLOW_TOKENS}, cfg)
    assert np.abs(host.x).max() > 0.1  # a non-trivial trajectory
    np.testing.assert_allclose(fused.x, host.x, atol=1e-4, rtol=0)
    assert fused.runtime_calls == 3 and fused.nfe == host.nfe


def test_flow_onnx_step_and_unrolled_match_host_loop(tiny_specs, tiny_bundles):
    from edgekit.bundle import Bundle
    from edgekit.decode.fused import decode_flow_fused
    from edgekit.export.fused import fused_bundle
    from edgekit.runtimes import open_fused, open_runtime

    spec, path = tiny_specs["flow"], tiny_bundles["flow"]
    step = fused_bundle(path, "step", {"solver": "rk4"}, spec=spec)
    unrolled = fused_bundle(path, "unrolled", {"solver": "heun", "steps": 3, "grid": "uniform"}, spec=spec)
    assert step["baked"] == {"solver": "rk4", "guidance": 1.0}
    assert unrolled["baked"]["time_grid"] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])
    assert unrolled["baked"]["nfe"] == 6
    bundle = Bundle.load(path)
    assert set(bundle.manifest["fused"]) == {"step", "unrolled"}
    cond = {"tokens": FLOW_TOKENS}
    with open_runtime(bundle) as host:
        for graph, cfg in (
            ("step", FlowDecodeConfig(steps=2, solver="rk4", seed=1)),
            ("unrolled", FlowDecodeConfig(steps=3, solver="heun", grid="uniform", seed=2)),
        ):
            rt, entry = open_fused(bundle, graph)
            with rt:
                fused = decode_flow_fused(rt, entry, cond, cfg)
            ref = decode_flow(host, bundle.meta, cond, cfg)
            np.testing.assert_allclose(fused.x, ref.x, atol=1e-4, rtol=0)
            assert fused.nfe == ref.nfe


def test_masked_onnx_step_greedy_tokens_identical(tiny_specs, tiny_bundles):
    from edgekit.bundle import Bundle
    from edgekit.decode.fused import decode_masked_fused
    from edgekit.export.fused import fused_bundle
    from edgekit.runtimes import open_fused, open_runtime

    spec, path = tiny_specs["masked"], tiny_bundles["masked"]
    entry = fused_bundle(path, "step", {"temperature": 0.0}, spec=spec)
    assert entry["ops"].get("TopK") == 1 and "RandomUniformLike" not in entry["ops"]
    assert entry["baked"]["steps"] == 6 and entry["baked"]["temperature"] == 0.0
    bundle = Bundle.load(path)
    cfg = MaskedDecodeConfig(steps=6, temperature=0.0)
    cond = {"class_id": CLASSES}
    rt, entry = open_fused(bundle, "step")
    with rt, open_runtime(bundle) as host:
        fused = decode_masked_fused(rt, entry, cond, cfg)
        ref = decode_masked(host, bundle.meta, cond, cfg).tokens
    assert len(np.unique(ref)) > 1  # the tiny model does not collapse to one token
    np.testing.assert_array_equal(fused, ref)


@pytest.mark.parametrize("guidance,spacing", [(1.0, 0), (3.0, 0), (1.0, 2)])
@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_masked_step_sampled_tokens_identical_for_same_seed(tiny_specs, guidance, schedule, spacing):
    from edgekit.decode.fused import decode_masked_fused

    spec = tiny_specs["masked"]
    opts = {
        "steps": 5,
        "schedule": schedule,
        "choice_temperature": 4.5,
        "temperature": 1.0,
        "guidance": guidance,
        "spacing": spacing,
    }
    rt, entry = _torch_fused(spec, "step", opts)
    for seed in (0, 7):
        cfg = MaskedDecodeConfig(seed=seed, **opts)
        fused = decode_masked_fused(rt, entry, {"class_id": CLASSES}, cfg)
        ref = decode_masked(_host(spec), spec.meta, {"class_id": CLASSES}, cfg).tokens
        np.testing.assert_array_equal(fused, ref)


def test_mask_counts_follow_the_host_loop(tiny_specs):
    from edgekit.export.fused import masked_mask_counts

    spec = tiny_specs["masked"]
    for steps, schedule in ((6, "cosine"), (4, "linear"), (8, "exp")):
        r = decode_masked(
            _host(spec), spec.meta, {"class_id": CLASSES}, MaskedDecodeConfig(steps=steps, schedule=schedule)
        )
        expected = [int(m[0]) for m in r.masked_per_step]
        assert masked_mask_counts(steps, schedule, spec.meta["seq_len"]).tolist() == expected


def test_asking_for_other_than_baked_is_one_clear_error(tiny_specs):
    from edgekit.decode.fused import decode_flow_fused, decode_masked_fused

    rt, entry = _torch_fused(tiny_specs["flow"], "step", {"solver": "rk4", "guidance": 1.0})
    with pytest.raises(UsageError) as err:
        decode_flow_fused(rt, entry, {"tokens": FLOW_TOKENS}, FlowDecodeConfig(solver="euler"))
    msg = str(err.value)
    assert "solver='rk4'" in msg and "solver='euler'" in msg and "--graph step --decode solver=euler" in msg
    assert "\n" not in msg
    opts = {"steps": 6, "schedule": "cosine", "choice_temperature": 4.5, "temperature": 0.0, "guidance": 1.0}
    rt, entry = _torch_fused(tiny_specs["masked"], "step", opts)
    with pytest.raises(UsageError, match=r"steps=6.*steps=8"):
        decode_masked_fused(rt, entry, {"class_id": CLASSES}, MaskedDecodeConfig(steps=8, temperature=0.0))


def test_graph_kind_not_available_for_model_kind():
    from types import SimpleNamespace

    from edgekit.export.fused import fused_module

    with pytest.raises(UsageError, match=r"--graph 'unrolled' is not available for the ar model .*; valid: host$"):
        fused_module(SimpleNamespace(kind="ar"), "unrolled", {})


# ---- masked unrolled: the whole K-step decode in one call ------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("guidance", [1.0, 3.0])
def test_masked_unrolled_wrapper_matches_host_loop(tiny_specs, temperature, guidance):
    from edgekit.decode.fused import decode_fused

    spec = tiny_specs["masked"]
    opts = {
        "steps": 5,
        "schedule": "cosine",
        "choice_temperature": 4.5,
        "temperature": temperature,
        "guidance": guidance,
    }
    rt, entry = _torch_fused(spec, "unrolled", opts)
    assert ("gumbel" in rt.inputs) == (temperature > 0)
    if temperature > 0:
        assert rt.inputs["gumbel"].shape == (5, 2, 12, 16) and rt.inputs["choice_noise"].shape == (5, 2, 12)
    for seed in (0, 7):
        cfg = MaskedDecodeConfig(seed=seed, **opts)
        fused = decode_fused("masked", rt, entry, {"class_id": CLASSES}, cfg)
        ref = decode_masked(_host(spec), spec.meta, {"class_id": CLASSES}, cfg)
        np.testing.assert_array_equal(fused.output, ref.tokens)
        assert (fused.runtime_calls, fused.nfe, fused.steps) == (1, ref.nfe, 5) and ref.runtime_calls >= 5


@pytest.mark.parametrize("steps", [1, 2])
def test_masked_unrolled_wrapper_few_steps(tiny_specs, steps):
    """K = 1 has no re-mask at all (every choice_noise slice unused); K = 2 one."""
    from edgekit.decode.fused import decode_masked_fused

    spec = tiny_specs["masked"]
    opts = {"steps": steps, "schedule": "linear", "choice_temperature": 2.0, "temperature": 1.0, "guidance": 1.0}
    rt, entry = _torch_fused(spec, "unrolled", opts)
    cfg = MaskedDecodeConfig(seed=3, **opts)
    fused = decode_masked_fused(rt, entry, {"class_id": CLASSES}, cfg)
    np.testing.assert_array_equal(fused, decode_masked(_host(spec), spec.meta, {"class_id": CLASSES}, cfg).tokens)


def test_masked_onnx_unrolled_greedy_tokens_identical_in_one_call(tiny_specs, tiny_bundles):
    import onnx
    from onnx import numpy_helper

    from edgekit.bundle import Bundle
    from edgekit.decode.fused import decode_fused
    from edgekit.export.fused import fused_bundle
    from edgekit.runtimes import open_fused, open_runtime

    spec, path = tiny_specs["masked"], tiny_bundles["masked"]
    entry = fused_bundle(path, "unrolled", {"temperature": 0.0}, spec=spec)
    assert list(entry["inputs"]) == ["class_id"] and list(entry["outputs"]) == ["tokens_out"]
    assert entry["baked"] == {
        "steps": 6,
        "schedule": "cosine",
        "choice_temperature": 4.5,
        "temperature": 0.0,
        # 12·cos(π/3) is 5.9999995 in float32 (the reference's precision): 5, not 6
        "guidance": 1.0,
        "spacing": 0,
        "mask_counts": [11, 10, 8, 5, 3, 0],
        "start": "all-masked",
    }
    # One TopK per re-masking step (the last step re-masks nothing); no random op in the graph.
    assert entry["ops"]["TopK"] == 5 and entry["ops"]["ArgMax"] == 6
    assert not {"RandomUniformLike", "RandomNormalLike", "Multinomial"} & set(entry["ops"])

    bundle = Bundle.load(path)
    host_file, fused_file = bundle.path_of("fp32"), bundle.path_of("fused-unrolled")
    # Weights are shared initializers, not K copies; the file (graph included) stays under 1.5x.
    weights = [
        sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(f)).graph.initializer)
        for f in (host_file, fused_file)
    ]
    assert weights[1] < 1.5 * weights[0]
    assert fused_file.stat().st_size < 1.5 * host_file.stat().st_size

    cond = {"class_id": CLASSES}
    cfg = MaskedDecodeConfig(steps=6, temperature=0.0)
    rt, entry = open_fused(bundle, "unrolled")
    with rt, open_runtime(bundle) as host:
        fused = decode_fused("masked", rt, entry, cond, cfg)
        ref = decode_masked(host, bundle.meta, cond, cfg)
    assert len(np.unique(ref.tokens)) > 1
    np.testing.assert_array_equal(fused.output, ref.tokens)
    assert fused.runtime_calls == 1 and fused.nfe == 6 == ref.runtime_calls


def test_masked_unrolled_refuses_other_than_baked(tiny_specs):
    from edgekit.decode.fused import decode_masked_fused

    opts = {"steps": 4, "schedule": "cosine", "choice_temperature": 4.5, "temperature": 1.0, "guidance": 1.0}
    rt, entry = _torch_fused(tiny_specs["masked"], "unrolled", opts)
    with pytest.raises(UsageError) as err:
        decode_masked_fused(rt, entry, {"class_id": CLASSES}, MaskedDecodeConfig(steps=5))
    msg = str(err.value)
    assert "steps=4" in msg and "steps=5" in msg and "--graph unrolled --decode steps=5" in msg and "\n" not in msg
    with pytest.raises(UsageError, match=r"temperature=1.0.*temperature=0.0"):
        decode_masked_fused(rt, entry, {"class_id": CLASSES}, MaskedDecodeConfig(steps=4, temperature=0.0))


def test_cli_export_and_run_masked_unrolled(tmp_path):
    """`edgekit export --graph unrolled` then `edgekit run --graph unrolled` on the tiny model
    (sampled, the tiny model's default temperature 1.0) gives the host loop's tokens in one call."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from edgekit.cli import app

    runner = CliRunner()
    factory = f"{Path(__file__).resolve().parents[1] / 'tiny_models.py'}:tiny_masked_spec"
    bundle = tmp_path / "m"
    r = runner.invoke(
        app,
        ["export", factory, "-o", str(bundle), "--batch", "2", "--graph", "unrolled", "--decode", "steps=4", "--json"],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    fused = json.loads(r.stdout)["fused"]["unrolled"]
    assert fused["baked"]["steps"] == 4 and fused["baked"]["temperature"] == 1.0
    assert list(fused["inputs"]) == ["gumbel", "choice_noise", "class_id"]
    docs, tokens = {}, {}
    for graph in ("unrolled", "host"):
        npz = tmp_path / f"{graph}.npz"
        args = [
            "run",
            str(bundle),
            "--graph",
            graph,
            "--steps",
            "4",
            "--seed",
            "5",
            "--cond",
            "class_id=1",
            "-o",
            str(npz),
            "--json",
        ]
        r = runner.invoke(app, args, catch_exceptions=False)
        assert r.exit_code == 0, r.output
        docs[graph], tokens[graph] = json.loads(r.stdout), np.load(npz)["tokens"]
    assert (docs["unrolled"]["runtime_calls"], docs["unrolled"]["nfe"]) == (1, 4)
    assert docs["host"]["runtime_calls"] == 4
    assert len(np.unique(tokens["host"])) > 1
    np.testing.assert_array_equal(tokens["unrolled"], tokens["host"])
    r = runner.invoke(app, ["run", str(bundle), "--graph", "unrolled", "--steps", "5", "--cond", "class_id=1"])
    assert r.exit_code == 2 and "steps=4" in r.output and "steps=5" in r.output


def test_open_fused_on_an_ar_bundle_says_it_has_no_fused_graphs(demo_bundles):
    from edgekit.bundle import Bundle
    from edgekit.runtimes import open_fused

    with pytest.raises(UsageError, match="not available for the ar model .*KV cache.*; valid: host$"):
        open_fused(Bundle.load(demo_bundles["ar"]), "step")
