"""What a quantization run is configured by: the profile (how ORT's quantizer is set up for a
target), the calibration and evaluation sizes, the op/node selection and the accuracy budget.

Defaults live here and nowhere else. ``QuantizeConfig.to_json()`` is what the manifest records.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from edgekit.arithmetic import SCHEMES, scheme_for
from edgekit.errors import UsageError, one_of
from edgekit.host import ISA_CLASSES, HostFacts, module_available
from edgekit.limits import MAX_SAMPLES, check_options
from edgekit.quantize.buckets.ranges import parse_step_buckets
from edgekit.quantize.overrides import check_overrides
from edgekit.quantize.registry import ProfileSettings, QuantizeProfile, quantize_profile
from edgekit.targets import load_target

# Runtimes the INT8 side of the budget can be measured on: the one the target deploys with
# (ort for `cpu`, openvino for `intel-cpu`). The FP32 reference is ONNX Runtime's either way.
BUDGET_RUNTIMES: tuple[str, ...] = ("ort", "openvino")
# "auto": the --target's runtime where it is installed (openvino for OpenVINO targets), else ort.
# QuantizeConfig.attention_scores: "int8" is opt-in. On OpenVINO's CPU plugin (the only engine it
# was measured on) it makes the attention an int8 kernel, but the masked demo at the default budget
# was no faster with it (docs/openvino.md, "The attention scores in int8").
ATTENTION_SCORES: tuple[str, ...] = ("float", "int8")
# The most memory ``--step-buckets auto`` may add over one scale (issue #27: RSS with N buckets
# <= 1.2x the single-scale model): a count past it is not tried (--bucket-memory).
BUCKET_MEMORY_BOUND = 1.2
# CLI name -> onnxruntime.quantization.CalibrationMethod member.
METHODS: dict[str, str] = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
# --method auto: calibrate with minmax; where its all-INT8 model misses the budget (not at FP32's
# own near-ties) the cpu and trt profiles judge AUTO_ALTERNATIVE's too and search on the better
# (quantize/cpu/method.py). matcha-tts's decoder at 400 frames: minmax all-INT8 check margin
# -0.23 and 44 of 65 layers to float; percentile -0.20 and 14; entropy -0.24 and 48.
AUTO_METHOD = "auto"
AUTO_ALTERNATIVE = "percentile"
# The ops whose weights carry the FLOPs; only these are INT8 by default.
WEIGHTED_OPS: tuple[str, ...] = ("MatMul", "Gemm", "Conv")


# Accuracy budget keys: direction and meaning. ">=" keys are floors, "<=" keys ceilings.
# Budget keys that are shares of decisions: a limit outside [0, 1] is refused.
SHARE_KEYS = frozenset({"lockstep_token_agreement", "top1_agreement", "final_token_agreement"})
BUDGET_RULES: dict[str, tuple[str, str]] = {
    "lockstep_token_agreement": (
        ">=",
        "share of token decisions equal to FP32's, both fed FP32's decode state, identical noise",
    ),
    "top1_agreement": (
        ">=",
        "share of top-1 (argmax) decisions equal to FP32's, both fed FP32's decode state (as `check` gates it)",
    ),
    "final_token_agreement": (
        ">=",
        "share of final output tokens equal to FP32's (free-running decodes, identical noise)",
    ),
    "event_accuracy_drop": ("<=", "FP32 minus INT8 ground-truth event accuracy of the final output (identical noise)"),
    "snr_db": (">=", "SNR of the final INT8 frames vs FP32 frames, dB (identical noise)"),
    "gt_snr_drop_db": ("<=", "FP32 minus INT8 SNR vs the clean ground-truth frames, dB"),
    # `edgekit check`'s default gate on the same held-out set and decode settings: the smallest
    # relative margin to any of its gated thresholds (flow: velocity SNR too). >= 0 means a
    # default `edgekit check` on this bundle passes, so "budget met" implies "check passes".
    "check_margin": (">=", "smallest relative margin of `edgekit check`'s default gates (< 0: check would fail)"),
}
BUDGET_ALIASES: dict[str, str] = {"token_agreement": "lockstep_token_agreement"}
# Which keys a kind can measure (a --budget key outside them is a usage error).
BUDGET_KEYS: dict[str, tuple[str, ...]] = {
    "masked": (
        "lockstep_token_agreement",
        "top1_agreement",
        "final_token_agreement",
        "event_accuracy_drop",
        "check_margin",
    ),
    "flow": ("snr_db", "gt_snr_drop_db", "check_margin"),
    "ar": (
        "lockstep_token_agreement",
        "top1_agreement",
        "final_token_agreement",
        "event_accuracy_drop",
        "check_margin",
    ),
}
# Per-kind defaults: 99 % of token decisions and 30 dB of frames, as the issue asks. Ground-truth
# drops are measured on 16 held-out rows, where they are noisy: the INT8 demo models' event
# accuracy drop over six eval seeds was -0.010..+0.013 (masked) and -0.004..+0.017 (ar), mean
# about 0, so the limit sits at 2 points, not 1 (which would fail on noise). Frames: the SNR drop vs
# the clean target is limited to 1 dB (INT8 adds at most ~26 % to FP32's error power), the
# default of `edgekit check` (evaluate/thresholds.py: quality_drop.snr_db = 1.0): a bundle that
# quantize passes must not fail check on the same metric. (It was 3 dB, "at most doubles the
# error power", which the 30 dB floor vs FP32 already implies for the flow demo's ~31 dB FP32.)
# final_token_agreement is reported, not budgeted by default: one flipped near-tie changes every
# later AR token (the rows then differ by chance, not by error): 77-93 % for that same ar model.
DEFAULT_BUDGETS: dict[str, dict[str, float]] = {
    "masked": {"lockstep_token_agreement": 0.99, "event_accuracy_drop": 0.02, "check_margin": 0.0},
    "flow": {"snr_db": 30.0, "gt_snr_drop_db": 1.0, "check_margin": 0.0},
    "ar": {"lockstep_token_agreement": 0.99, "event_accuracy_drop": 0.02, "check_margin": 0.0},
}


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


# Auto sample counts (--calib-samples / --eval-samples left out). A token model's budget counts
# decisions, and a row of a long sequence holds many: 16 held-out rows of the demos' 64 tokens are
# 1,024 decisions, and so are 4 rows of aMUSEd's 256, where each row is a 15 s FP32 decode and
# more rows made quantize cost ~100 FP32 decodes. Flow rows (an SNR over frames) keep 8 and 16.
TOKEN_KINDS = ("masked", "ar")
HELDOUT_DECISIONS = 1024  # held-out rows until they hold this many token decisions (4..16 rows)
CALIB_TOKENS = 512  # calibration rows until they hold this many tokens (4..8 rows)


def auto_samples(kind: str, tokens_per_row: int | None, batch: int) -> tuple[int, int]:
    """(calibration rows, held-out rows) for a ``kind`` model whose decode decides
    ``tokens_per_row`` tokens a row, rounded up to whole graph batches (a batch's rows cost one
    decode either way)."""
    if kind in TOKEN_KINDS and tokens_per_row:
        calib = min(8, max(4, math.ceil(CALIB_TOKENS / tokens_per_row)))
        held = min(16, max(4, math.ceil(HELDOUT_DECISIONS / tokens_per_row)))
    else:
        calib, held = 8, 16
    step = max(1, int(batch))
    return -(-calib // step) * step, -(-held // step) * step


@dataclass(frozen=True)
class QuantizeConfig:
    profile: str = "cpu"  # a registered profile (quantize/registry.py; the built-in ones: quantize/profiles.py)
    method: str = AUTO_METHOD  # auto | minmax | entropy | percentile (onnxruntime calibrators)
    percentile: float = 99.999  # only for method=percentile: the clipped share of |x|
    # Calibration sequences (decoded with FP32; every network call of their loops is recorded).
    # 8 covers every step of the loop already; more mostly widens the extreme ranges.
    # None = auto (``auto_samples``: fewer rows where each row holds many tokens).
    calib_samples: int | None = None
    calib_seed: int = 1000  # seeds calib_seed.. : disjoint from the evaluation seeds below
    eval_samples: int | None = None  # held-out sequences decoded with FP32 and INT8 for the budget; None = auto
    eval_seed: int = 0  # seeds eval_seed.. (demo conditions are held out from training anyway)
    # Node names, op types or module paths (``blocks.0.mlp``: a prefix matches) to keep in float.
    exclude: tuple[str, ...] = ()
    # Budget overrides {key: threshold}; the kind's DEFAULT_BUDGETS fill the rest.
    budget: Mapping[str, float] = field(default_factory=dict)
    op_types: tuple[str, ...] = WEIGHTED_OPS  # op types that may be INT8 at all
    float_attention_core: bool = True  # QKᵀ and AV MatMuls (both inputs activations) stay float
    # With the core float otherwise: QKᵀ in INT8 with symmetric int8 Q and K ("int8"), the one form
    # OpenVINO's CPU plugin runs as an int8 attention kernel (a zero point keeps it f32), or float
    # (``ATTENTION_SCORES``). A budget fallback like any INT8 node.
    attention_scores: str = "float"
    float_time_embedding: bool = True  # flow: sinusoid + time MLP stay float (t·1000 rad needs > 8 bits)
    # Decode options (steps, guidance, ...) for calibration and evaluation; {} = bundle defaults.
    decode: Mapping[str, Any] = field(default_factory=dict)
    fallback: bool = True  # move the most sensitive nodes to float activations (weight-only) until the budget holds
    max_fallback: int | None = None  # at most this many fallback nodes; None = as many as needed
    sensitivity_feeds: int = (
        4  # recorded feeds (spread over the loop) the ranking compares (qnn: 4x this, per step bucket)
    )
    # quant_pre_process first: ORT's QGemm fusions need its MatMul+Add -> Gemm. When it fails (ORT's
    # symbolic shape inference does not know every op) the graph is quantized without it.
    preprocess: bool = True
    # --cond NAME=VALUE for every calibration and held-out row (a number, or a .npy of one batch).
    cond: Mapping[str, str] = field(default_factory=dict)
    # --cond-data FILE.npz|DIR: real condition rows, split into calibration and held-out rows
    # (evaluate.ConditionData.split); None = demo held-out set / seeded draws in declared ranges.
    cond_data: str | None = None
    threads: int = 0  # ORT intra-op threads for calibration/evaluation sessions; 0 = ORT default
    # Where the INT8 candidates are decoded for the budget: the target's runtime (BUDGET_RUNTIMES).
    # OpenVINO's int8 kernels round differently from ORT's, so a budget met on one is re-measured on the other.
    runtime: str = "auto"
    # --target: the target's profile, CPU class and budget runtime (``resolved``); the qnn profile also
    # measures its budget on the target's HTP (htp_arch, soc_model) instead of the default SoC's.
    target: str | None = None
    # The CPU arithmetic class a profile with cpu_arithmetic (cpu) quantizes for (edgekit.host.ISA_CLASSES),
    # which picks its scheme (arithmetic.py); "host" = this machine's class. Ignored by the others.
    isa: str = "host"
    # That profile's scheme by name (arithmetic.SCHEMES), or "auto": the one chosen for ``isa``.
    scheme: str = "auto"
    # Per-layer decisions to honour (quantize/overrides.py: --overrides FILE, `edgekit debug --fix`):
    # nodes kept float or weight-only, qnn tensors at 16 bit from the start.
    overrides: tuple[Mapping[str, Any], ...] = ()
    # --step-buckets: activation scales per step range of the decode loop (quantize/buckets/): None
    # or 1 = one scale for every step; N = N ranges; "auto" = the fewest that meet the budget.
    step_buckets: int | str | None = None
    # --bucket-memory: the most resident memory a bucket count ``auto`` keeps may add over one scale,
    # as a ratio, measured on the budget runtime (quantize/buckets/candidate.py), for a profile with
    # bucket_memory; 0 = no bound. An explicit --step-buckets N is taken as asked.
    bucket_memory: float = BUCKET_MEMORY_BOUND

    def __post_init__(self) -> None:
        object.__setattr__(self, "budget", _frozen(self.budget))
        object.__setattr__(self, "decode", _frozen(self.decode))
        object.__setattr__(self, "cond", _frozen(self.cond))
        if self.cond_data is not None:
            object.__setattr__(self, "cond_data", str(self.cond_data))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "op_types", tuple(self.op_types))
        object.__setattr__(
            self, "overrides", tuple(MappingProxyType(dict(o)) for o in check_overrides(self.overrides, "overrides"))
        )
        quantize_profile(self.profile)  # an unknown name is the one error listing the valid ones
        one_of("--isa", self.isa, ("host", *ISA_CLASSES))
        object.__setattr__(self, "step_buckets", parse_step_buckets(self.step_buckets))
        memory = self.bucket_memory
        if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not (memory == 0 or 1 <= memory <= 100):
            raise UsageError(
                f"--bucket-memory {memory!r} is not a ratio of one scale's "
                "memory; give one in [1, 100] (e.g. 1.2), or 0 for no bound"
            )
        one_of("--scheme", self.scheme, ("auto", *SCHEMES))
        if self.runtime != "auto" and self.runtime not in BUDGET_RUNTIMES:
            raise UsageError(
                f"--runtime {self.runtime!r} cannot measure the budget; valid: {', '.join(BUDGET_RUNTIMES)}"
            )
        one_of("--method", self.method, (AUTO_METHOD, *METHODS))
        one_of("attention_scores", self.attention_scores, ATTENTION_SCORES)
        for name in ("calib_samples", "eval_samples", "sensitivity_feeds"):
            value = getattr(self, name)
            if value is None and name != "sensitivity_feeds":
                continue  # auto
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SAMPLES:
                flag = "--" + name.replace("_", "-")
                raise UsageError(f"{flag} {value!r} is invalid; valid: an integer in [1, {MAX_SAMPLES}]")
        check_options({"--seed": self.eval_seed, "calib_seed": self.calib_seed, "--threads": self.threads})
        if not 0 < self.percentile <= 100:
            raise UsageError(f"percentile {self.percentile!r} is invalid; valid: 0 < p <= 100 (e.g. 99.999)")
        if self.max_fallback is not None and self.max_fallback < 0:
            raise UsageError(f"max_fallback {self.max_fallback!r} is invalid; valid: None or >= 0")
        unknown = [k for k in self.budget if k not in BUDGET_RULES]
        if unknown:
            raise UsageError(f"--budget {unknown[0]!r} is unknown; valid keys: {', '.join(BUDGET_RULES)}")

    @property
    def calibrator(self) -> str:
        """The calibration method the ranges are computed with: auto starts with minmax."""
        return "minmax" if self.method == AUTO_METHOD else self.method

    def resolved(self) -> QuantizeConfig:
        """This config with what ``target`` decides filled in: the target's quantization profile,
        its CPU class (an explicit ``isa`` wins) and the runtime that measures the budget (``auto``:
        openvino for an OpenVINO target where it is installed, else ort)."""
        if self.target is None:
            return dataclasses.replace(self, runtime="ort" if self.runtime == "auto" else self.runtime)
        target = load_target(self.target)
        runtime = self.runtime
        if runtime == "auto":
            runtime = "openvino" if target.uses_openvino and module_available("openvino") else "ort"
        isa = target.isa if self.isa == "host" else self.isa
        return dataclasses.replace(self, profile=target.quantization_profile, runtime=runtime, isa=isa)

    def with_samples(self, kind: str, tokens_per_row: int | None, batch: int) -> tuple[QuantizeConfig, str | None]:
        """This config with the sample counts left to auto filled in (``auto_samples``), and a
        line saying what auto chose and why (None when both were given)."""
        if self.calib_samples is not None and self.eval_samples is not None:
            return self, None
        calib, held = auto_samples(kind, tokens_per_row, batch)
        cfg = dataclasses.replace(
            self,
            calib_samples=calib if self.calib_samples is None else self.calib_samples,
            eval_samples=held if self.eval_samples is None else self.eval_samples,
        )
        per_row = f"{tokens_per_row} token decisions a row" if kind in TOKEN_KINDS and tokens_per_row else kind
        return cfg, (
            f"samples: {cfg.calib_samples} calibration, {cfg.eval_samples} held-out rows (auto for {per_row}; "
            "--calib-samples / --eval-samples to choose)"
        )

    @property
    def samples(self) -> tuple[int, int]:
        """(calibration rows, held-out rows) once resolved (``with_samples``, which quantize runs
        first)."""
        if self.calib_samples is None or self.eval_samples is None:
            raise ValueError("sample counts left to auto: resolve them with with_samples() first")
        return self.calib_samples, self.eval_samples

    @property
    def arithmetic(self) -> str:
        """The ISA class quantized for: ``isa``, or this host's class for "host"."""
        return HostFacts.detect().isa_class if self.isa == "host" else self.isa

    @property
    def entry(self) -> QuantizeProfile:
        """The profile's registry entry: its settings, budgets, hooks and what it does."""
        return quantize_profile(self.profile)

    @property
    def settings(self) -> ProfileSettings:
        """The profile's settings, with the scheme for ``arithmetic`` where it has cpu_arithmetic."""
        base = self.entry.settings
        if not self.entry.cpu_arithmetic:
            return base
        s = scheme_for(self.arithmetic) if self.scheme == "auto" else SCHEMES[self.scheme]
        return dataclasses.replace(
            base,
            activation_type=s.activation_type,
            weight_type=s.weight_type,
            reduce_range=s.reduce_range,
            weight_bound=s.weight_bound,
            scheme=s.name,
        )

    def budget_for(self, kind: str) -> dict[str, float]:
        """The kind's default budget (the profile's own where it has one, its ``budgets``) with
        this config's overrides (only keys of that kind)."""
        base = dict(DEFAULT_BUDGETS[kind]) | dict(self.entry.budgets.get(kind, {}))
        foreign = [k for k in self.budget if k not in BUDGET_KEYS[kind]]
        if foreign:
            raise UsageError(
                f"--budget {foreign[0]} does not apply to the {kind} model; valid keys: {', '.join(BUDGET_KEYS[kind])}"
            )
        return base | {k: float(v) for k, v in self.budget.items()}

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "overrides":
                value = [dict(o) for o in value]
            doc[f.name] = (
                dict(value) if isinstance(value, Mapping) else (list(value) if isinstance(value, tuple) else value)
            )
        doc["settings"] = self.settings.to_json()
        if self.entry.cpu_arithmetic:
            doc["arithmetic"] = self.arithmetic
        return doc


def parse_budget(items: list[str] | tuple[str, ...] | None) -> dict[str, float]:
    """``["lockstep_token_agreement=0.98", "snr_db=25"]`` -> {key: value}; one clear error per bad item."""
    out: dict[str, float] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        # Renamed (issue #15): `check`'s token_agreement is another measure (free-running final
        # tokens, which quantize calls final_token_agreement); the old budget key still works.
        key = BUDGET_ALIASES.get(key, key)
        if not sep or key not in BUDGET_RULES:
            raise UsageError(
                f"--budget {item!r} is not KEY=VALUE with a known key; valid keys: {', '.join(BUDGET_RULES)}",
                hint="e.g. --budget lockstep_token_agreement=0.98 --budget snr_db=28",
            )
        try:
            out[key] = float(value)
        except ValueError:
            raise UsageError(f"--budget {item!r}: {value!r} is not a number") from None
        if not math.isfinite(out[key]):  # nan compares false to everything: the budget would never decide
            raise UsageError(f"--budget {item!r}: the limit must be a finite number")
        if key in SHARE_KEYS and not 0 <= out[key] <= 1:  # a limit no model can meet (or every one does)
            raise UsageError(f"--budget {item!r}: {key} is a share of decisions; give a limit in [0, 1]")
    return out
