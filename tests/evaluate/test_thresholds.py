"""Default thresholds, the TOML override file, and baseline files."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from edgekit.errors import EdgekitError
from edgekit.evaluate.thresholds import (
    BASELINE_KEYS,
    DEFAULTS,
    QUALITY_DROP_DEFAULTS,
    Rule,
    allowed_regression,
    check_comparable,
    default_thresholds,
    load_baseline,
    load_thresholds,
    save_baseline,
)


def _toml(tmp_path, text: str):
    path = tmp_path / "thresholds.toml"
    path.write_text(text)
    return path


def test_defaults_cover_every_kind_with_valid_rules():
    assert set(DEFAULTS) == {"masked", "flow", "ar"}
    for kind in DEFAULTS:
        t = default_thresholds(kind)
        gated = [m for m, r in t.rules.items() if r.threshold is not None]
        assert gated, kind
        for rule in t.rules.values():
            assert rule.bound in ("min", "max")
            assert rule.floor >= 0 and (rule.tolerance is None or rule.tolerance >= 0)
    masked = default_thresholds("masked")
    assert masked.rule("token_agreement") == DEFAULTS["masked"]["token_agreement"]
    assert masked.rule("quality_drop.validity") == QUALITY_DROP_DEFAULTS["validity"]
    # A user hook's metric has no default: reported, never gating.
    assert masked.rule("quality_drop.my_metric") == Rule("max", None)
    assert default_thresholds("flow").rule("snr_db").threshold == 30.0  # the INT8 budget
    with pytest.raises(EdgekitError, match="valid: masked, flow, ar"):
        default_thresholds("gan")


def test_toml_overrides_numbers_tables_and_off(tmp_path):
    path = _toml(
        tmp_path,
        """
[masked]
token_agreement = 0.97
logits_kl = { threshold = 0.005, tolerance = 0.25, floor = 0.0001 }
sequence_exact_match = 0.5
top1_agreement = "off"
quality_drop.validity = 0.125
quality_drop.my_metric = { threshold = 0.01 }

[flow]
snr_db = 40
""",
    )
    t = load_thresholds("masked", path)
    assert t.source == str(path)
    # A number replaces the threshold only; tolerance and floor keep their defaults.
    assert t.rule("token_agreement") == dataclasses.replace(DEFAULTS["masked"]["token_agreement"], threshold=0.97)
    assert t.rule("logits_kl") == Rule("max", 0.005, tolerance=0.25, floor=0.0001, unit="nats")
    assert t.rule("sequence_exact_match").threshold == 0.5  # reported by default, gated here
    assert t.rule("top1_agreement").threshold is None
    assert t.rule("quality_drop.validity").threshold == 0.125
    assert t.rule("quality_drop.my_metric") == Rule("max", 0.01)
    assert t.rule("first_divergence_step") == DEFAULTS["masked"]["first_divergence_step"]  # untouched
    assert set(t.explicit) == {
        "token_agreement",
        "logits_kl",
        "sequence_exact_match",
        "top1_agreement",
        "quality_drop.validity",
        "quality_drop.my_metric",
    }
    # The flow section applies to flow bundles only.
    assert load_thresholds("flow", path).rule("snr_db").threshold == 40.0
    assert t.rule("snr_db") is None


def test_unknown_key_lists_the_valid_ones(tmp_path):
    path = _toml(tmp_path, "[masked]\ntoken_agrement = 0.9\n")
    with pytest.raises(EdgekitError) as exc:
        load_thresholds("masked", path)
    msg = str(exc.value)
    assert "unknown key masked.token_agrement" in msg
    for key in (*DEFAULTS["masked"], "quality_drop"):
        assert key in msg.split("valid:")[1]
    # Sections of other kinds are validated too (one file serves every bundle).
    with pytest.raises(EdgekitError, match="unknown key flow.token_agreement; valid: snr_db, cosine_similarity"):
        load_thresholds("masked", _toml(tmp_path, "[flow]\ntoken_agreement = 0.9\n"))
    with pytest.raises(EdgekitError, match=r"unknown section \[maskd\]; valid: masked, flow, ar"):
        load_thresholds("masked", _toml(tmp_path, "[maskd]\nlogits_kl = 0.1\n"))
    with pytest.raises(EdgekitError, match="unknown key masked.logits_kl.limit; valid: threshold, tolerance, floor"):
        load_thresholds("masked", _toml(tmp_path, "[masked]\nlogits_kl = { limit = 0.1 }\n"))


@pytest.mark.parametrize(
    "body,needle",
    [
        ('token_agreement = "high"', "masked.token_agreement = 'high' has the wrong type"),
        ("token_agreement = true", "masked.token_agreement = True has the wrong type"),
        ("logits_kl = { threshold = [1] }", "masked.logits_kl.threshold = [1] has the wrong type"),
        ('logits_kl = { floor = "off" }', "masked.logits_kl.floor = 'off' has the wrong type; valid: a finite number"),
        ("logits_kl = { tolerance = -1 }", "masked.logits_kl.tolerance = -1.0 is negative"),
        ("quality_drop = 0.1", "masked.quality_drop must be a table"),
        ("quality_drop.validity = nan", "masked.quality_drop.validity = nan has the wrong type"),
    ],
)
def test_wrong_types_name_the_key(tmp_path, body, needle):
    with pytest.raises(EdgekitError) as exc:
        load_thresholds("masked", _toml(tmp_path, f"[masked]\n{body}\n"))
    assert needle in str(exc.value)


def test_unreadable_thresholds_files(tmp_path):
    with pytest.raises(EdgekitError, match="does not exist"):
        load_thresholds("masked", tmp_path / "missing.toml")
    with pytest.raises(EdgekitError, match="is not valid TOML"):
        load_thresholds("masked", _toml(tmp_path, "[masked\n"))
    with pytest.raises(EdgekitError, match="masked must be a table"):
        load_thresholds("masked", _toml(tmp_path, "masked = 3\n"))


# ---- baselines ----------------------------------------------------------------------------------
def _doc(**metrics):
    doc = {k: None for k in BASELINE_KEYS}
    doc |= {
        "model": "masked-demo",
        "kind": "masked",
        "reference": "ort:fp32",
        "candidate": "ort:int8",
        "n": 16,
        "seed": 0,
        "greedy": False,
        "decode": {"steps": 8},
        "candidate_decode": {"steps": 8},
    }
    return doc | {"metrics": metrics}


def test_baseline_round_trip_keeps_inf_and_nan(tmp_path):
    path = save_baseline(tmp_path / "sub" / "base.json", _doc(snr_db=math.inf, first=float("nan"), kl=0.001, gone=None))
    raw = json.loads(path.read_text())  # strict JSON: no Infinity/NaN literals
    assert raw["schema"] == "edgekit.check-baseline/1" and raw["metrics"]["snr_db"] == "inf"
    base = load_baseline(path)
    assert base.metrics["snr_db"] == math.inf and math.isnan(base.metrics["first"]) and base.metrics["kl"] == 0.001
    assert "gone" not in base.metrics
    assert base.settings["decode"] == {"steps": 8}
    check_comparable(base, _doc())  # same settings: fine


def test_baseline_from_other_settings_is_an_error(tmp_path):
    base = load_baseline(save_baseline(tmp_path / "b.json", _doc(kl=0.1)))
    other = _doc() | {"n": 32, "decode": {"steps": 6}}
    with pytest.raises(EdgekitError) as exc:
        check_comparable(base, other)
    assert "n: baseline 16, this run 32" in str(exc.value) and "decode: baseline {'steps': 8}" in str(exc.value)
    assert "--save-baseline" in str(exc.value)


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "does not exist"),
        ("{", "not readable JSON"),
        ('{"schema": "other/1"}', "has schema 'other/1'"),
        ('{"schema": "edgekit.check-baseline/1"}', "lacks"),
    ],
)
def test_bad_baseline_files(tmp_path, content, needle):
    path = tmp_path / "b.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(EdgekitError, match=needle):
        load_baseline(path)


def test_bad_metric_value_in_baseline(tmp_path):
    path = save_baseline(tmp_path / "b.json", _doc(kl=0.1))
    doc = json.loads(path.read_text())
    doc["metrics"]["kl"] = "lots"
    path.write_text(json.dumps(doc))
    with pytest.raises(EdgekitError, match="metric value 'lots' is not a number"):
        load_baseline(path)


def test_allowed_regression_is_relative_with_an_absolute_floor():
    rule = Rule("max", 0.02, tolerance=0.5, floor=0.001)
    assert allowed_regression(rule, 0.01) == pytest.approx(0.005)  # 50 % of the baseline
    assert allowed_regression(rule, 0.0001) == pytest.approx(0.001)  # near 0: the floor
    assert allowed_regression(rule, math.inf) == 0.001
    assert allowed_regression(Rule("min", None), 0.5) is None  # no tolerance: not compared
