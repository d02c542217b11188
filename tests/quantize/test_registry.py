"""A quantization profile is its registry entry: one registered from the documented files alone
(docs/ARCHITECTURE.md, "Where to add things") quantizes through ``quantize_bundle`` and the CLI,
its settings, budgets and ``emulated`` flag take effect, and no stage needed its name."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.arithmetic import quantized_nodes
from edgekit.bundle import Bundle
from edgekit.cli import app
from edgekit.errors import EdgekitError, UsageError
from edgekit.quantize import (
    ProfileSettings,
    QuantizeConfig,
    QuantizeProfile,
    SearchResult,
    profile_names,
    quantize_bundle,
    quantize_profile,
    quantize_unbudgeted,
    register_profile,
    unregister_profile,
)
from edgekit.quantize.calibrate import range_drift
from edgekit.quantize.graph import analyse_graph
from edgekit.runtimes.ort import OrtOptions, OrtRuntime
from edgekit.targets import QUANTIZATION_PROFILES

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

WHY = "a stand-in device: its time is not the device's"


class OneShot:
    """A profile's hooks: every weighted op INT8 at once with the entry's settings, no search."""

    def __init__(self, run):
        self.run = run

    def check(self) -> None:
        if self.run.cfg.exclude:
            raise EdgekitError("--exclude does not apply to --profile fake")

    def prepare(self) -> None:
        run = self.run
        run.prepared = run.fp32_path
        run.preprocess = {"applied": False, "skipped_because": "the fake profile quantizes the graph as exported"}
        run.plan = analyse_graph(run.fp32_path)

    def calibrate(self) -> None:
        pass  # quantize_unbudgeted calibrates on the recorded feeds

    def budget_runtime(self, model: Path, spin: bool = True, bucket: bool = False):
        return OrtRuntime(model, OrtOptions(intra_op_threads=self.run.cfg.threads, spin_between_runs=spin))

    def open_candidate(self, model: Path, spin: bool | None = None):
        return self.budget_runtime(model, spin=spin is not False)

    def search(self) -> SearchResult:
        run = self.run
        model = quantize_unbudgeted(
            run.fp32_path, run.tmp / "fake.onnx", run.traj.feeds, dataclasses.replace(run.cfg, preprocess=False)
        )
        with self.open_candidate(model) as rt:
            metrics = run.measure(rt)
        passed, checks = run.judge(metrics)
        known = run.plan.by_name()
        int8 = sorted(n for n in quantized_nodes(onnx.load(str(model))) if n in known)
        total = run.plan.matmul_flops()
        return SearchResult(
            model=model,
            passed=passed,
            metrics=metrics,
            checks=checks,
            int8_nodes=int8,
            history=[{k: metrics.get(k) for k in run.budget} | {"passed": passed}],
            int8_flop_share={"matmul": run.plan.matmul_flops(int8) / total if total else None, "weighted": None},
            drift=range_drift(run.prepared, [], run.traj),
        )


FAKE = QuantizeProfile(
    name="fake",
    help="a test profile: everything INT8 at once, symmetric int8 activations",
    settings=ProfileSettings(
        activation_type="QInt8",
        weight_type="QInt8",
        per_channel=True,
        reduce_range=False,
        activation_symmetric=True,
        weight_symmetric=True,
        quantize_bias=False,
        quantized_outputs=(),
        skip_gemv=False,
        weight_only_float=False,
        weight_only_fallback=False,
    ),
    hooks=OneShot,
    budgets={"masked": {"lockstep_token_agreement": 0.5, "check_margin": -1e9}},
    emulated=True,
    emulated_why=WHY,
)


@pytest.fixture
def fake_profile():
    register_profile(FAKE)
    try:
        yield FAKE
    finally:
        unregister_profile(FAKE.name)


def _activation_zero_point_dtypes(path: Path) -> set[str]:
    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    return {
        str(onnx.numpy_helper.to_array(inits[n.input[2]]).dtype)
        for n in model.graph.node
        if n.op_type == "QuantizeLinear" and n.input[0] not in inits and len(n.input) > 2 and n.input[2] in inits
    }


def test_a_registered_profile_quantizes_through_the_pipeline(fake_profile, tiny_bundles, tmp_path):
    root = Path(shutil.copytree(tiny_bundles["masked"], tmp_path / "masked"))
    cfg = QuantizeConfig(profile="fake", calib_samples=2, eval_samples=2, cond={"class_id": "1"})
    s = quantize_bundle(root, cfg)
    assert s["profile"] == "fake" and s["passed"], s["budget"]["checks"]
    assert s["budget"]["limits"]["lockstep_token_agreement"] == 0.5  # the entry's budget over the kind's default
    assert s["speed"] == {"measured": False, "reason": WHY}  # emulated: not timed
    assert s["config"]["settings"]["activation_type"] == "QInt8" and "arithmetic" not in s["config"]
    assert s["selection"]["int8"], s["selection"]
    int8 = Bundle.load(root).path_of("int8")
    assert _activation_zero_point_dtypes(int8) == {"int8"}  # the entry's settings made the graph
    assert Bundle.load(root).quantization.profile == "fake"
    with pytest.raises(EdgekitError, match="--exclude does not apply to --profile fake"):  # its own check hook
        quantize_bundle(root, dataclasses.replace(cfg, exclude=("Gemm",)))


def test_the_cli_offers_and_runs_a_registered_profile(fake_profile, tiny_bundles, tmp_path):
    runner = CliRunner()
    wide = {"COLUMNS": "400", "TERMINAL_WIDTH": "400"}
    r = runner.invoke(app, ["quantize", "--help"], env=wide)
    assert "[cpu|trt|qnn|fake]" in r.stdout and "fake: a test profile" in r.stdout
    root = Path(shutil.copytree(tiny_bundles["masked"], tmp_path / "masked"))
    r = runner.invoke(
        app,
        [
            "quantize",
            str(root),
            "--profile",
            "fake",
            "--cond",
            "class_id=1",
            "--calib-samples",
            "2",
            "--eval-samples",
            "2",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["profile"] == "fake"


def test_an_unregistered_profile_is_one_usage_error():
    assert "fake" not in profile_names()
    r = CliRunner().invoke(app, ["quantize", "nowhere", "--profile", "fake"])
    assert r.exit_code == 2 and "'fake' is not one of 'cpu', 'trt', 'qnn'" in r.stderr
    with pytest.raises(UsageError, match="--profile 'fake' is unknown; valid: cpu, trt, qnn"):
        QuantizeConfig(profile="fake")


def test_registering_checks_the_entry_and_refuses_a_second_of_a_name(fake_profile):
    with pytest.raises(ValueError, match="already registered"):
        register_profile(FAKE)
    with pytest.raises(ValueError, match="emulated_why"):
        register_profile(dataclasses.replace(FAKE, name="fake2", emulated_why=""))
    with pytest.raises(ValueError, match="overrides"):
        register_profile(dataclasses.replace(FAKE, name="fake3", overrides="layer"))


def test_every_profile_a_target_may_name_is_registered():
    """Target files are checked in the hallway (targets.QUANTIZATION_PROFILES); each name must have an
    entry, and the facts lint and build read there are the entry's."""
    assert set(QUANTIZATION_PROFILES) <= set(profile_names())
    for name, facts in QUANTIZATION_PROFILES.items():
        entry = quantize_profile(name)
        assert (facts.cpu_arithmetic, facts.tensorrt_qdq) == (entry.cpu_arithmetic, entry.graph_rules is not None), name
    assert [p for p in profile_names() if quantize_profile(p).emulated] == ["qnn"]
