"""The demo's profile engine (issue #44.3): another engine than the recorded one wins only where
it is surely faster; on a busy host it is timed again, then the recorded engine is kept and one
warning says why. Stand-in engines, clock and load: no time is asserted, no engine package needed."""

from __future__ import annotations

import pytest

from edgekit.bundle import Bundle
from edgekit.profile import engines
from tests.fakes.host import StandInHost

pytest.importorskip("onnxruntime")


class _Engine:
    def __init__(self, name: str):
        self.name = name

    def close(self) -> None:
        pass


def _pick(monkeypatch, bundle, host: StandInHost, ms: dict[str, float]) -> dict:
    """fastest_engine with every engine "installed", each decode advancing the stand-in clock."""
    monkeypatch.setattr(engines, "available_engines", lambda: ["openvino", "ort"])
    monkeypatch.setattr(engines, "open_runtime", lambda bundle, name, precision, threads: _Engine(name))
    calls = {name: host.call(name, [t]) for name, t in ms.items()}
    monkeypatch.setattr(engines, "decode", lambda kind, rt, meta, cond, cfg: calls[rt.name]())
    monkeypatch.setattr(engines, "SPIN_GAP_S", 0.0)
    return engines.fastest_engine(bundle, "fp32", rounds=5, probe=host.probe)


def test_a_surely_faster_engine_is_chosen_on_a_quiet_host(tiny, monkeypatch):
    host = StandInHost(loads=(0.4,))
    pick = _pick(monkeypatch, Bundle.load(tiny["masked"]), host, {"openvino": 60, "ort": 100})
    assert (pick["runtime"], pick["verdict"], pick["within_noise"], pick["warning"]) == (
        "openvino",
        "faster",
        False,
        None,
    )
    assert pick["why"] == "the fastest here, 1.67x ort's speed per decode" and pick["decision"]["rounds"] == 1
    assert pick["median_ms"] == {"openvino": 60.0, "ort": 100.0}


def test_on_a_busy_host_the_recorded_engine_is_kept_and_said_once(tiny, monkeypatch):
    host = StandInHost(loads=(3.1,))
    pick = _pick(monkeypatch, Bundle.load(tiny["masked"]), host, {"openvino": 60, "ort": 100})
    assert (pick["runtime"], pick["recorded"], pick["within_noise"]) == ("ort", "ort", True)
    assert pick["recorded_because"] == "edgekit's default runtime" and pick["decision"]["rounds"] == 3
    assert pick["warning"] == (
        "profile engine: kept ort (edgekit's default runtime): openvino within noise of it after 3 rounds "
        "(load 3.1 on 2 cores (2.1 of it other processes))"
    )
    assert host.calls == {"openvino": 1 + 3 * 5, "ort": 1 + 3 * 5}  # one warm-up, three rounds of five


def test_the_engine_build_made_is_the_recorded_one(tiny, tmp_path, monkeypatch):
    import shutil

    root = shutil.copytree(tiny["masked"], tmp_path / "m")
    b = Bundle.load(root)
    b.record_entry("engines", "cpu-ov/fp32", {"path": "x.blob", "runtime": "openvino", "precision": "fp32"})
    b.save()
    assert engines.recorded_engine(Bundle.load(root, verify=False), "fp32", ["openvino", "ort"]) == (
        "openvino",
        "the engine `edgekit build` made in fp32",
    )
    assert engines.recorded_engine(Bundle.load(root, verify=False), "int8", ["openvino", "ort"])[0] == "ort"
