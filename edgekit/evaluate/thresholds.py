"""What passes: per-kind default thresholds (all in ``DEFAULTS`` below), a TOML override file,
and baseline files that store a known-good run's metrics for regression checks.

A thresholds file sets any subset; everything else keeps its default::

    [masked]
    token_agreement = 0.95                                   # a number sets the threshold
    logits_kl = { threshold = 0.02, tolerance = 0.5 }        # a table sets threshold/tolerance/floor
    first_divergence_step = 3.0                              # gate a metric that is reported only by default
    sequence_exact_match = "off"                             # "off" = report, do not gate
    quality_drop.validity = 0.1                              # ground-truth (or --metric hook) metrics
    [flow]
    snr_db = 35.0

Unknown sections and keys are an error listing the valid ones; a value of the wrong type is an
error naming its key. A baseline comparison fails a metric when it regressed by more than
``max(tolerance · |baseline value|, floor)`` against the baseline.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from edgekit._deps import require
from edgekit.bundle import now_iso, write_json_atomic
from edgekit.errors import EdgekitError
from edgekit.userfiles import read_user_text

BOUNDS = ("min", "max")
RULE_KEYS = ("threshold", "tolerance", "floor")


@dataclass(frozen=True)
class Rule:
    """How one metric is judged."""

    bound: (
        str  # "min": passes when value >= threshold (agreement, SNR); "max": when value <= threshold (KL, error, drop)
    )
    threshold: float | None  # None = reported only, never fails the check
    # Baseline check: allowed regression relative to the baseline's value (0.5 = may get 50 % worse);
    # None = this metric is not compared with a baseline.
    tolerance: float | None = None
    floor: float = 0.0  # ...but never less than this absolute amount: metrics near 0 (KL, drops) need slack
    unit: str = ""  # shown in the table

    def __post_init__(self) -> None:
        if self.bound not in BOUNDS:
            raise ValueError(f"bound {self.bound!r}; valid: {BOUNDS}")


# ---- the defaults, in one place -------------------------------------------------------------------
# For decodes under the bundle's sampling defaults with identical noise on both variants (see
# stage.py) over the default 16 conditions. Calibrated on the trained demo models (numbers in the
# comments: careful INT8 = QDQ, u8 activations, per-channel s8 weights, weighted MatMuls except
# the first and last, calibrated on trajectories; damaged = one weight + 2 std of noise; naive =
# every op per-tensor, calibrated on the first step only).
# The teacher-forced network metrics (logits_kl, top1_agreement, velocity_snr_db) do not depend on
# sampling and carry the gate; trajectory agreement only guards against the catastrophic, because
# one near-tie flip re-routes the rest of a row (the demo corpus has many near-ties: durations
# and transitions with probabilities 0.3-0.7), which greedy decoding makes worse, not better.
DEFAULTS: Mapping[str, Mapping[str, Rule]] = MappingProxyType(
    {
        "masked": MappingProxyType(
            {
                # Share of final tokens equal to the reference's: careful INT8 0.87-0.96, damaged or
                # naive 0.72-0.79, the same model decoded with another schedule 0.19-0.69.
                "token_agreement": Rule("min", 0.70, tolerance=0.0, floor=0.1),
                # Rows identical end to end: too coarse at N = 16 to gate by default.
                "sequence_exact_match": Rule("min", None, tolerance=0.0, floor=0.25),
                # Mean step (1..K) after which a row first differs; K + 1 = never. Reported only.
                "first_divergence_step": Rule("min", None, unit="step"),
                # Teacher-forced KL(ref ‖ cand) per masked position, nats: the network's own error.
                # Careful INT8 1.4e-4..1.4e-3; damaged or naive 1e-2..2e-2.
                "logits_kl": Rule("max", 0.005, tolerance=1.0, floor=0.001, unit="nats"),
                # Teacher-forced argmax agreement at the masked positions (near-ties flip): careful
                # INT8 0.94-0.97, damaged 0.84-0.91.
                "top1_agreement": Rule("min", 0.90, tolerance=0.0, floor=0.02),
                # Share of those positions where FP32's own top two are within NEAR_TIE_NATS, and of
                # top-1's flips that fell there: what a failed top-1 gate counted. Reported only.
                "reference_near_ties": Rule("max", None),
                "flips_at_near_ties": Rule("max", None),
            }
        ),
        "flow": MappingProxyType(
            {
                # Final frames vs the reference's (same x0), the INT8 budget: careful INT8
                # 51 dB, dynamic INT8 of every MatMul 33 dB, a damaged weight 28 dB, naive 2 dB.
                "snr_db": Rule("min", 30.0, tolerance=0.0, floor=3.0, unit="dB"),
                "cosine_similarity": Rule("min", 0.999, tolerance=0.0, floor=0.0005),
                # Scale-dependent (demo frames are ~0.1..1.5): reported only.
                "max_abs_error": Rule("max", None, tolerance=1.0, floor=0.01),
                # Teacher-forced velocity SNR over every (x, t) the reference visits; the solver
                # loses 2-7 dB on the way to the final frames, so 30 here goes with 30 there.
                "velocity_snr_db": Rule("min", 30.0, tolerance=0.0, floor=3.0, unit="dB"),
            }
        ),
        "ar": MappingProxyType(
            {
                # One flip changes every later token's context: careful INT8 0.63-0.89 and a damaged
                # model 0.34-0.41 on 16 rows; too noisy to gate, reported (baseline-checked loosely).
                "token_agreement": Rule("min", None, tolerance=0.0, floor=0.15),
                "sequence_exact_match": Rule("min", None, tolerance=0.0, floor=0.25),
                # Mean 0-based position of the first differing token; max_len = never. Reported only.
                "first_divergence_position": Rule("min", None, unit="token"),
                # Careful INT8 1e-4..5e-4; damaged 8e-3; naive per-tensor everything 1.7.
                "logits_kl": Rule("max", 0.005, tolerance=1.0, floor=0.001, unit="nats"),
                # Careful INT8 0.99; damaged 0.94-0.955.
                "top1_agreement": Rule("min", 0.95, tolerance=0.0, floor=0.02),
                "reference_near_ties": Rule("max", None),
                "flips_at_near_ties": Rule("max", None),
            }
        ),
    }
)

# Ground-truth quality: how much worse (reference minus candidate, sign by metric) the candidate
# may score. Keys are the metrics of edgekit.models.corpus; a --metric hook's metrics are
# reported only unless a thresholds file gates them.
QUALITY_DROP_DEFAULTS: Mapping[str, Rule] = MappingProxyType(
    {
        # Share of valid sequences: at N = 16 one sequence is 0.0625; allow two.
        "validity": Rule("max", 0.125, tolerance=None),
        # Share of possible events (first unit, transitions, durations): careful INT8 within
        # ±0.015 (sampling, N = 16), damaged +0.035.
        "event_accuracy": Rule("max", 0.02, tolerance=0.0, floor=0.01),
        # Exact NLL of the *valid* sequences only, nats per token: under the demos' sampling 0-1 of
        # 16 sequences are valid, so it compares one sequence with another (or with none): reported.
        "nll_per_token": Rule("max", None, tolerance=None, unit="nats"),
        # Frames vs the clean target of their tokens (the fp32 demo: 31 dB). Careful INT8 loses
        # 0.05 dB; dynamic INT8 of every MatMul 2.2 dB, i.e. 66 % more error against the truth.
        "snr_db": Rule("max", 1.0, tolerance=0.0, floor=0.5, unit="dB"),
        "l1": Rule("max", None, tolerance=0.0, floor=0.005),
    }
)

QUALITY_PREFIX = "quality_drop."
KINDS = tuple(DEFAULTS)


@dataclass(frozen=True)
class Thresholds:
    """The rules one check applies: ``rules`` maps metric name (quality drops as
    ``quality_drop.<name>``) to its ``Rule``; ``source`` says where they came from."""

    kind: str
    rules: Mapping[str, Rule]
    source: str = "defaults"
    explicit: tuple[str, ...] = ()  # metrics the file set (a quality drop it names must exist)

    def rule(self, metric: str) -> Rule | None:
        """The rule of ``metric``; a quality drop without one is reported only."""
        if metric in self.rules:
            return self.rules[metric]
        if metric.startswith(QUALITY_PREFIX):
            return Rule("max", None)
        return None

    def quality_keys(self) -> list[str]:
        return [m for m in self.rules if m.startswith(QUALITY_PREFIX)]


def default_thresholds(kind: str) -> Thresholds:
    if kind not in DEFAULTS:
        raise EdgekitError(f"model kind {kind!r} has no thresholds; valid: {', '.join(KINDS)}")
    rules = dict(DEFAULTS[kind]) | {QUALITY_PREFIX + k: r for k, r in QUALITY_DROP_DEFAULTS.items()}
    return Thresholds(kind, MappingProxyType(rules))


def load_thresholds(kind: str, path: Path | str | None = None) -> Thresholds:
    """The defaults of ``kind`` updated by the TOML file at ``path`` (sections of other kinds are
    validated too, so one file can serve every bundle of a CI repo)."""
    base = default_thresholds(kind)
    if path is None:
        return base
    try:
        import tomllib
    except ImportError:  # Python 3.10: the same parser as a package
        tomllib = require("tomli")

    path = Path(path)
    text = read_user_text(
        path, "--thresholds", error=EdgekitError
    )  # a regular file of bounded size: never a FIFO or /dev/zero
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise EdgekitError(f"thresholds file {path} is not valid TOML ({exc})") from None
    unknown = [k for k in doc if k not in DEFAULTS]
    if unknown:
        raise EdgekitError(f"thresholds file {path}: unknown section [{unknown[0]}]; valid: {', '.join(KINDS)}")
    parsed = {k: _parse_section(path, k, section) for k, section in doc.items()}
    mine = parsed.get(kind, {})
    return Thresholds(kind, MappingProxyType(dict(base.rules) | mine), source=str(path), explicit=tuple(mine))


def _parse_section(path: Path, kind: str, section: Any) -> dict[str, Rule]:
    if not isinstance(section, dict):
        raise EdgekitError(f"thresholds file {path}: {kind} must be a table ([{kind}]), not {type(section).__name__}")
    out: dict[str, Rule] = {}
    for key, value in section.items():
        if key == "quality_drop":
            if not isinstance(value, dict):
                raise EdgekitError(
                    f"thresholds file {path}: {kind}.quality_drop must be a table of metric = number, "
                    f"not {type(value).__name__}"
                )
            for metric, v in value.items():
                default = QUALITY_DROP_DEFAULTS.get(metric, Rule("max", None))
                out[QUALITY_PREFIX + metric] = _parse_rule(path, f"{kind}.quality_drop.{metric}", v, default)
            continue
        if key not in DEFAULTS[kind]:
            valid = ", ".join([*DEFAULTS[kind], "quality_drop"])
            raise EdgekitError(f"thresholds file {path}: unknown key {kind}.{key}; valid: {valid}")
        out[key] = _parse_rule(path, f"{kind}.{key}", value, DEFAULTS[kind][key])
    return out


def _number(path: Path, key: str, value: Any, allow_off: bool) -> float | None:
    if allow_off and value == "off":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        valid = 'a finite number or "off"' if allow_off else "a finite number"
        raise EdgekitError(f"thresholds file {path}: {key} = {value!r} has the wrong type; valid: {valid}")
    return float(value)


def _parse_rule(path: Path, key: str, value: Any, default: Rule) -> Rule:
    if not isinstance(value, dict):
        return dataclasses.replace(default, threshold=_number(path, key, value, allow_off=True))
    bad = [k for k in value if k not in RULE_KEYS]
    if bad:
        raise EdgekitError(f"thresholds file {path}: unknown key {key}.{bad[0]}; valid: {', '.join(RULE_KEYS)}")
    changes: dict[str, Any] = {}
    if "threshold" in value:
        changes["threshold"] = _number(path, f"{key}.threshold", value["threshold"], allow_off=True)
    if "tolerance" in value:
        tol = _number(path, f"{key}.tolerance", value["tolerance"], allow_off=True)
        if tol is not None and tol < 0:
            raise EdgekitError(f'thresholds file {path}: {key}.tolerance = {tol} is negative; valid: >= 0 or "off"')
        changes["tolerance"] = tol
    if "floor" in value:
        floor = _number(path, f"{key}.floor", value["floor"], allow_off=False)
        if floor < 0:
            raise EdgekitError(f"thresholds file {path}: {key}.floor = {floor} is negative; valid: >= 0")
        changes["floor"] = floor
    return dataclasses.replace(default, **changes)


# ---- baselines ----------------------------------------------------------------------------------
BASELINE_SCHEMA = "edgekit.check-baseline/1"
# What must match for two runs' metrics to be comparable: same model, variants, evaluation set, decode.
BASELINE_KEYS = ("model", "kind", "reference", "candidate", "n", "seed", "greedy", "decode", "candidate_decode")


@dataclass(frozen=True)
class Baseline:
    """A known-good run: its settings (``BASELINE_KEYS``) and metric values."""

    path: str
    settings: Mapping[str, Any]
    metrics: Mapping[str, float]
    created: str = ""


def _encode(value: Any) -> Any:
    """JSON has no inf/nan: store them as strings / null and read them back in ``_decode``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> float:
    if value is None:
        return float("nan")
    if value in ("inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(value)
    return float(value)


def save_baseline(path: Path | str, doc: Mapping[str, Any]) -> Path:
    """Write the metrics and settings of a check document (``edgekit.check/1``) as a baseline."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = {"schema": BASELINE_SCHEMA, "created": now_iso()}
    base |= {k: doc[k] for k in BASELINE_KEYS}
    base["metrics"] = {k: v for k, v in doc["metrics"].items() if v is not None}
    write_json_atomic(path, _encode(base))
    return path


def load_baseline(path: Path | str) -> Baseline:
    path = Path(path)
    hint = "write one from a known-good run with `edgekit check BUNDLE --save-baseline FILE`"
    text = read_user_text(path, "--baseline", error=EdgekitError)  # a regular file of bounded size
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise EdgekitError(
            f"baseline file {path} is not readable JSON ({type(exc).__name__}: {str(exc)[:200]})", hint=hint
        ) from None
    if not isinstance(doc, dict) or doc.get("schema") != BASELINE_SCHEMA:
        schema = doc.get("schema") if isinstance(doc, dict) else None
        raise EdgekitError(f"baseline file {path} has schema {schema!r}; valid: {BASELINE_SCHEMA!r}", hint=hint)
    missing = [k for k in (*BASELINE_KEYS, "metrics") if k not in doc]
    if missing or not isinstance(doc["metrics"], dict):
        raise EdgekitError(f"baseline file {path} lacks {missing or ['metrics']}", hint=hint)
    try:
        metrics = {str(k): _decode(v) for k, v in doc["metrics"].items()}
    except TypeError as exc:
        raise EdgekitError(f"baseline file {path}: metric value {exc.args[0]!r} is not a number", hint=hint) from None
    return Baseline(
        str(path),
        MappingProxyType({k: doc[k] for k in BASELINE_KEYS}),
        MappingProxyType(metrics),
        doc.get("created", ""),
    )


def check_comparable(baseline: Baseline, doc: Mapping[str, Any]) -> None:
    """Raise when ``doc`` (a check document) was measured differently from ``baseline``."""
    current = json.loads(json.dumps(_encode({k: doc[k] for k in BASELINE_KEYS})))
    differ = [k for k in BASELINE_KEYS if current[k] != baseline.settings[k]]
    if differ:
        what = "; ".join(f"{k}: baseline {baseline.settings[k]!r}, this run {current[k]!r}" for k in differ)
        raise EdgekitError(
            f"baseline {baseline.path} was measured with other settings ({what})",
            hint="rerun with the baseline's settings, or write a new baseline with --save-baseline",
        )


def allowed_regression(rule: Rule, baseline_value: float) -> float | None:
    """How much worse than ``baseline_value`` a metric may get; None = not baseline-checked."""
    if rule.tolerance is None:
        return None
    if not math.isfinite(baseline_value):
        return rule.floor
    return max(rule.tolerance * abs(baseline_value), rule.floor)
