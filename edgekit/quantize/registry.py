"""One entry per quantization profile: how ``quantize_static`` is set up for it, its default budgets
where they differ, the hooks that run it in the one pipeline (``stage.quantize_bundle``, behind the
``hooks.ProfileHooks`` protocol), what it does that the others do not (the fields below, never its
name), and its help line.

Modelled on ``edgekit.runtimes.registry``: a profile registers itself with one
``register_profile(...)`` call (the built-in ones in ``quantize/profiles.py``, which importing
``edgekit.quantize`` runs); everything else reads this table: ``QuantizeConfig`` (valid names,
settings, budgets), the pipeline (hooks, ``emulated``), the cpu/trt search (the flags),
``debug --fix`` (which overrides a profile takes), and the CLI's ``--profile`` choices and help.
Importing this module imports no profile: the hooks arrive with their entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from edgekit.errors import one_of
from edgekit.quantize.hooks import ProfileHooks


@dataclass(frozen=True)
class ProfileSettings:
    """How ``quantize_static`` is called for one target family (a profile's ``settings``)."""

    activation_type: str  # onnxruntime QuantType member name for activations
    weight_type: str  # ... for weights
    per_channel: bool  # one weight scale per output channel: weights of these layers differ by 10x per row
    reduce_range: bool  # 7-bit weights: only for x86 without VNNI, where u8s8 accumulation can saturate
    activation_symmetric: bool  # zero point 0 for activations (TensorRT accepts nothing else)
    weight_symmetric: bool  # zero point 0 for weights
    quantize_bias: bool  # int32 bias (scale = x_scale * w_scale) lets ORT fuse DQ -> Gemm into QGemm
    # Weighted op types whose *output* also gets Q/DQ. ORT CPU fuses DQ -> Conv only into QLinearConv,
    # which needs a quantized output; TensorRT wants Q/DQ on inputs only.
    quantized_outputs: tuple[str, ...]
    skip_gemv: bool  # leave single-row MatMul/Gemm in float (TensorRT runs GEMV faster in fp16/fp32)
    # Weighted nodes kept float *by rule* (the flow time MLP) store their weights as INT8 +
    # DequantizeLinear (per channel): compute and activations stay float, the file shrinks (flow
    # demo 0.300x -> 0.285x at no measurable cost). --exclude always stays fully float.
    weight_only_float: bool
    # Budget fallbacks are weight-only too (symmetric per-channel int8 weight + DQ, zero point 0):
    # the error the budget catches is activation quantization; with FP32 fallback weights the
    # final demo INT8 files were 0.34x (masked) and 0.39x (flow) of FP32, over the 0.3x target.
    weight_only_fallback: bool
    # Embedding tables (a Gather's constant table: ``graph.NodeInfo.table``) stored int8 with one
    # scale per row, only the gathered rows dequantized (``cpu/tables.py``): a table is a quarter of
    # its FP32 size and no kernel reads it whole. Tables under ``tables.MIN_TABLE_BYTES`` stay float.
    int8_gather_tables: bool = False
    # "full": |q| <= 127 | "pair": no two weights the int8 kernel sums in int16 exceed 128 together
    # (arithmetic.py: exact on x86 without VNNI, where full-range u8s8 saturates).
    weight_bound: str = "full"
    # The scheme (arithmetic.SCHEMES) these settings came from, for a profile with cpu_arithmetic; "" otherwise.
    scheme: str = ""

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class QuantizeProfile:
    """One quantization profile. Its behaviour is its fields and hooks: no stage tests its name."""

    name: str  # what --profile takes, a target's quantization_profile and the manifest record
    help: str  # one line for --profile help: what it is for
    settings: ProfileSettings
    # (the run, a context.QuantizeRun) -> its hooks: a class, typically. Typed Any here: the run's
    # module reads this table (config -> registry), so naming it would close a cycle.
    hooks: Callable[[Any], ProfileHooks]
    # Per model kind, the budget keys whose default differs from config.DEFAULT_BUDGETS.
    budgets: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # The int8 model runs on a CPU's int8 kernels: --isa / --scheme choose its scheme
    # (arithmetic.SCHEMES, whose types replace the settings'), the summary records that arithmetic,
    # and the form of its budget fallbacks (FP32 or weight-only) is timed on this host.
    cpu_arithmetic: bool = False
    # --step-buckets auto is bounded by --bucket-memory, measured on the budget runtime (where each
    # bucket's graph is one more session or compiled model, as deployed).
    bucket_memory: bool = False
    # The rules the written graph must meet where it deploys: path -> every violation. A profile
    # that breaks its own rules is a bug, and the run stops.
    graph_rules: Callable[[Path], list[str]] | None = None
    # The budget runtime emulates the device on this CPU: INT8 is not timed against FP32 here, and
    # ``emulated_why`` says why in the summary.
    emulated: bool = False
    emulated_why: str = ""
    # What --overrides (and so `debug --fix`) can change: "node" (float, weight-only) or "tensor" (int16).
    overrides: str = "node"
    extra: str | None = None  # the edgekit extra it needs installed (its help says so), e.g. "qnn"


OVERRIDE_KINDS: tuple[str, ...] = ("node", "tensor")

_PROFILES: dict[str, QuantizeProfile] = {}


def register_profile(profile: QuantizeProfile, *, replace: bool = False) -> QuantizeProfile:
    """Add ``profile`` under its name (a second one of that name is refused unless ``replace``)."""
    problems = [
        why
        for bad, why in (
            (not profile.name.replace("-", "").replace("_", "").isalnum(), "a name takes letters, digits, '-' or '_'"),
            (not isinstance(profile.settings, ProfileSettings), "settings must be a ProfileSettings"),
            (
                profile.overrides not in OVERRIDE_KINDS,
                f"overrides {profile.overrides!r}; valid: {', '.join(OVERRIDE_KINDS)}",
            ),
            (
                profile.emulated and not profile.emulated_why,
                "an emulated profile says why its time is not the device's (emulated_why)",
            ),
            (profile.name in _PROFILES and not replace, "a profile of that name is already registered"),
        )
        if bad
    ]
    if problems:
        raise ValueError(f"quantization profile {profile.name!r}: {'; '.join(problems)}")
    _PROFILES[profile.name] = profile
    return profile


def quantize_profile(name: str, flag: str = "--profile") -> QuantizeProfile:
    """The entry of profile ``name``; an unknown name is the one error listing the valid ones."""
    one_of(flag, name, _PROFILES)
    return _PROFILES[name]


def names() -> tuple[str, ...]:
    """Every registered profile name, the built-in ones first."""
    return tuple(_PROFILES)


def profile_help() -> str:
    """``cpu: ... | trt: ... | qnn: ... (needs edgekit[qnn])``: every registered profile with its
    line and the extra it needs."""
    return " | ".join(
        f"{p.name}: {p.help}" + (f" (needs edgekit[{p.extra}])" if p.extra else "") for p in _PROFILES.values()
    )


def unregister_profile(name: str) -> None:
    """Remove a registered profile (a plugin's, in tests)."""
    _PROFILES.pop(name, None)


__all__ = [
    "OVERRIDE_KINDS",
    "ProfileSettings",
    "QuantizeProfile",
    "names",
    "profile_help",
    "quantize_profile",
    "register_profile",
    "unregister_profile",
]
