"""The one schema of ``edgekit.json``: every field a stage reads, with its JSON type, checked when
a bundle loads, before any stage touches the manifest. A field of the wrong type is one line:
``manifest <path> field model.meta.conditioning: expected an object, found list [1, 2]``.

Fields this edgekit does not know (written by a newer one) are ignored, never an error: a bundle
stays readable across versions as long as what is known keeps its type.

Everything a stage reads is here, down to what ``debug --fix`` re-quantizes with
(``quantization.config``) and the step buckets a runtime opens (``quantization.step_buckets``):
counts and seeds within the bounds the options have (``limits``), and anywhere in the document
numbers are finite and text is valid Unicode (edgekit writes neither NaN nor lone surrogates;
a manifest holding them was edited, and no later save could write it back)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgekit.errors import BundleError
from edgekit.host import ISA_CLASSES
from edgekit.limits import MAX_ROWS, MAX_SAMPLES, MAX_SEED, MAX_STEPS, MAX_THREADS
from edgekit.spec import GRAPHS, GROUND_TRUTH_TASKS, KINDS, tensor_specs_from_json


class _Mismatch(Exception):
    def __init__(self, where: str, expected: str, value: Any):
        super().__init__(where)
        self.where, self.expected, self.value = where, expected, value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f"{where}[{key!r}]"


class Type:
    """One JSON type a field must have; ``check`` raises _Mismatch naming the field."""

    expected = "a value"

    def check(self, value: Any, where: str) -> None:
        if not self.accepts(value):
            raise _Mismatch(where, self.expected, value)

    def accepts(self, value: Any) -> bool:
        return True


class Str(Type):
    expected = "a string"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str)


class Int(Type):
    def __init__(self, low: int = 0, high: int | None = None):
        self.low, self.high = low, high
        self.expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def accepts(self, value: Any) -> bool:
        return type(value) is int and value >= self.low and (self.high is None or value <= self.high)


class Number(Type):
    expected = "a number"

    def accepts(self, value: Any) -> bool:
        return type(value) in (int, float)


class Bool(Type):
    expected = "true or false"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)


class IntOr(Type):
    """An integer within ``Int``'s bounds, or one of a few words (``--step-buckets 4 | auto``)."""

    def __init__(self, number: Int, *words: str):
        self.number, self.words = number, words
        self.expected = f"{number.expected} or {', '.join(words)}"

    def accepts(self, value: Any) -> bool:
        return self.number.accepts(value) or (isinstance(value, str) and value in self.words)


class Scalar(Type):
    expected = "a string, number, true/false or null"

    def accepts(self, value: Any) -> bool:
        return value is None or isinstance(value, (str, int, float, bool))


class OneOf(Type):
    def __init__(self, *values: str):
        self.values = values
        self.expected = "one of " + ", ".join(values)

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values


class Uncond(Type):
    """A conditioning input's unconditional fill: null (none), a number, a (nested) list of
    numbers, or "same" (the unconditional rows keep the conditional value: a frame mask)."""

    expected = 'null, a number, a list of numbers or "same"'

    def accepts(self, value: Any) -> bool:
        if value is None or value == "same" or type(value) in (int, float):
            return True
        return isinstance(value, list) and all(self.accepts(v) and v != "same" and v is not None for v in value)


class Nullable(Type):
    def __init__(self, inner: Type):
        self.inner = inner
        self.expected = f"null or {inner.expected}"

    def check(self, value: Any, where: str) -> None:
        if value is not None:
            try:
                self.inner.check(value, where)
            except _Mismatch as exc:
                if exc.where == where:  # the value itself, not a field inside it: say null is fine too
                    raise _Mismatch(where, self.expected, value) from None
                raise


class ListOf(Type):
    def __init__(self, item: Type):
        self.item = item
        self.expected = f"a list of {item.expected.removeprefix('a ').removeprefix('an ')} items"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise _Mismatch(where, self.expected, value)
        for i, item in enumerate(value):
            self.item.check(item, f"{where}[{i}]")


class Table(Type):
    """An object with known fields (typed when present; ``required`` ones must be there) and
    any other fields of type ``extra`` (default: anything, ignored)."""

    expected = "an object"

    def __init__(
        self, fields: Mapping[str, Type] | None = None, required: tuple[str, ...] = (), extra: Type | None = None
    ):
        self.fields, self.required, self.extra = dict(fields or {}), required, extra

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _Mismatch(where, self.expected, value)
        for key in self.required:
            if key not in value:
                raise _Mismatch(_join(where, key), self.fields[key].expected, _MISSING)
        for key, item in value.items():
            rule = self.fields.get(key, self.extra)
            if rule is not None:
                rule.check(item, _join(where, str(key)))


class MapOf(Table):
    """An object whose every value has type ``value`` (names chosen by the user: inputs, artifacts)."""

    def __init__(self, value: Type, non_empty: bool = False):
        super().__init__(extra=value)
        self.non_empty = non_empty
        self.expected = "a non-empty object" if non_empty else "an object"

    def check(self, value: Any, where: str) -> None:
        if self.non_empty and value == {}:
            raise _Mismatch(where, self.expected, value)
        super().check(value, where)


_MISSING = object()
ANY = Type()
OBJECT = Table()
NAME = Str()
HASH = Str()
FILE = Table({"path": Str(), "sha256": HASH}, required=("path",))
SIDE_FILE = Table(
    {"path": Str(), "sha256": HASH, "bytes": Int(0)}, required=("path", "sha256")
)  # an engine's weights file (older entries lack bytes)
TENSOR = Table(
    {"shape": ListOf(Int(0)), "dtype": Str(), "low": Nullable(Number()), "high": Nullable(Number())},
    required=("shape", "dtype"),
)
DECODE = Table(
    {
        "steps": Int(1, MAX_STEPS),
        "length": Nullable(Int(1, MAX_STEPS)),
        "top_k": Int(0),
        "temperature": Number(),
        "choice_temperature": Number(),
        "guidance": Number(),
        "sway": Number(),
        "schedule": Str(),
        "solver": Str(),
        "grid": Str(),
        "spacing": Int(0),
    },
    extra=Scalar(),
)

META = Table(
    {
        "conditioning": Nullable(MapOf(Nullable(Table({"uncond": Uncond()})))),
        **{
            k: Int(1)
            for k in (
                "vocab_size",
                "seq_len",
                "num_classes",
                "channels",
                "frames",
                "max_len",
                "utterance_frames",
                "frames_per_token",
            )
        },
        **{k: Int(0) for k in ("mask_id", "bos_id")},
        "chunk": Table(
            {"frames": Int(1), "context": Int(0), "lookahead": Int(0), "tokens_input": Str(), "sigma_min": Number()},
            required=("frames", "context", "lookahead", "tokens_input"),
        ),
    }
)

# What `edgekit quantize` recorded as its QuantizeConfig (``quantize.config.QuantizeConfig.to_json``):
# `debug --fix` re-quantizes with it. The types here; the values (a profile, a method) are checked
# by QuantizeConfig itself, its message naming this field (``debug.fix.recorded_config``).
QUANTIZE_CONFIG = Table(
    {
        "profile": Str(),
        "method": Str(),
        "percentile": Number(),
        "calib_samples": Int(1, MAX_SAMPLES),
        "calib_seed": Int(0, MAX_SEED),
        "eval_samples": Int(1, MAX_SAMPLES),
        "eval_seed": Int(0, MAX_SEED),
        "exclude": ListOf(Str()),
        "budget": MapOf(Number()),
        "op_types": ListOf(Str()),
        "float_attention_core": Bool(),
        "float_time_embedding": Bool(),
        "decode": DECODE,
        "fallback": Bool(),
        "max_fallback": Nullable(Int(0)),
        "sensitivity_feeds": Int(1, MAX_SAMPLES),
        "preprocess": Bool(),
        "cond": MapOf(Str()),
        "cond_data": Nullable(Str()),
        "threads": Int(0, MAX_THREADS),
        "runtime": Str(),
        "target": Nullable(Str()),
        "isa": OneOf("host", *ISA_CLASSES),
        "scheme": Str(),
        "overrides": ListOf(Table(extra=Scalar())),
        "step_buckets": Nullable(IntOr(Int(1), "auto")),
        "bucket_memory": Number(),
    }
)
# The step buckets a runtime opens (``runtimes.bucketed.step_buckets`` checks how the parts agree).
STEP_BUCKETS = Table(
    {
        "n": Int(1),
        "by": Str(),
        "boundaries": ListOf(Number()),
        "artifacts": ListOf(Str()),
        "binding": Str(),
        "weights_file": Str(),
        "calls_per_bucket": ListOf(Int(0)),
    }
)

MANIFEST_SCHEMA = Table(
    {
        "schema": Str(),
        "created": Str(),
        "updated": Str(),
        "model": Table(
            {
                "name": NAME,
                "kind": OneOf(*KINDS),
                "meta": META,
                "source": Nullable(Str()),
                "source_sha256": Nullable(Str()),
                "ground_truth": Nullable(OneOf(*GROUND_TRUTH_TASKS)),
                "condition_sampler": Nullable(Str()),
            },
            required=("name", "kind", "meta"),
        ),
        "io": Table(
            {"inputs": MapOf(TENSOR, non_empty=True), "outputs": MapOf(TENSOR, non_empty=True)},
            required=("inputs", "outputs"),
        ),
        "decode_defaults": Nullable(DECODE),
        "artifacts": MapOf(
            Table(
                {
                    "path": Str(),
                    "sha256": HASH,
                    "bytes": Int(0),
                    "made_by": Str(),
                    "config": OBJECT,
                    "created": Str(),
                    "side_files": ListOf(
                        Table({"path": Str(), "sha256": HASH, "bytes": Int(0)}, required=("path", "sha256", "bytes"))
                    ),
                },
                required=("path", "sha256", "bytes", "made_by"),
            )
        ),
        "verification": Nullable(
            MapOf(
                Table(
                    {
                        "passed": Bool(),
                        "reference": Str(),
                        "candidate": Str(),
                        "samples": Int(0),
                        "atol": Number(),
                        "rtol": Number(),
                        "outputs": MapOf(OBJECT),
                    }
                )
            )
        ),
        "quantization": Nullable(
            Table(
                {
                    "profile": Nullable(Str()),
                    "passed": Bool(),
                    # "unknown": quantized for "host" on a CPU whose class edgekit could not read.
                    "arithmetic": Nullable(
                        Table(
                            {
                                "isa": Nullable(OneOf(*ISA_CLASSES, "unknown")),
                                "validated_on": Nullable(Str()),
                                "scheme": Nullable(Table({"name": Str()})),
                            }
                        )
                    ),
                    "budget": Table(
                        {
                            "eval": Table(
                                {"samples": Int(1, MAX_ROWS), "seed": Int(0, MAX_SEED), "decode": Nullable(DECODE)}
                            )
                        }
                    ),
                    "config": Nullable(QUANTIZE_CONFIG),
                    "step_buckets": Nullable(STEP_BUCKETS),
                    "speed": Nullable(
                        Table(
                            {
                                "measured": Bool(),
                                "isa": Nullable(Str()),
                                "runtime": Nullable(Str()),
                                "int8_speedup": Nullable(Number()),
                            }
                        )
                    ),
                }
            )
        ),
        "engines": Nullable(
            MapOf(
                Table(
                    {
                        "path": Str(),
                        "sha256": HASH,
                        "bytes": Int(0),
                        "runtime": Str(),
                        "runtime_version": Nullable(Str()),
                        "format": Nullable(Str()),
                        "device": Nullable(Str()),
                        "device_name": Nullable(Str()),
                        "cpu_isa": Nullable(ListOf(Str())),
                        "portable": Bool(),
                        "compute_capability": Nullable(Str()),
                        "l4t": Nullable(Str()),
                        "target": Str(),
                        "precision": Str(),
                        "source": Str(),
                        "source_onnx_sha256": Str(),
                        "metadata": FILE,
                        "required_operators": FILE,
                        "external_data": SIDE_FILE,
                        "weights": SIDE_FILE,  # OpenVINO IR: the .bin beside the .xml
                        "config": Nullable(Table({"device": Nullable(Str()), "compiled": Nullable(OBJECT)})),
                        # OpenVINO: the routes build measured and the one it shipped (builder/openvino_routes.py).
                        "route": Nullable(
                            Table({"shipped": Str(), "format": Str(), "why": Str(), "routes": MapOf(OBJECT)})
                        ),
                        "qnn": Nullable(
                            Table(
                                {
                                    "htp_arch": Scalar(),
                                    "soc_model": Scalar(),
                                    "qnn_sdk": Scalar(),
                                    "onnxruntime_qnn": Scalar(),
                                }
                            )
                        ),
                        "session_seconds": Nullable(
                            Table({"compile": Nullable(Number()), "load_precompiled": Nullable(Number())})
                        ),
                        # ORT: what edgekit changed in the graph file, and the session options an app loads it with (builder/ort.py).
                        "graph_changes": Nullable(
                            Table({"fusions": MapOf(Int(0)), "disabled_optimizers": ListOf(Str())})
                        ),
                        "session_options": Nullable(
                            Table(
                                {
                                    "graph_optimization_level": OneOf("disable", "basic", "extended", "all"),
                                    "config_entries": MapOf(Str()),
                                    "note": Str(),
                                }
                            )
                        ),
                        # A step-bucketed int8 model's engines: bucket 0 is the entry itself (``builder.stage``).
                        "buckets": Nullable(
                            Table(
                                {
                                    "by": Nullable(Str()),
                                    "boundaries": ListOf(Number()),
                                    "binding": Str(),
                                    "engines": ListOf(
                                        Table(
                                            {"path": Str(), "sha256": HASH, "source": Str()},
                                            required=("path", "source"),
                                        )
                                    ),
                                }
                            )
                        ),
                    },
                    required=("path",),
                )
            )
        ),
        "fused": Nullable(
            MapOf(
                Table(
                    {
                        "graph": OneOf(*GRAPHS[1:]),
                        "artifact": Str(),
                        "path": Str(),
                        "mask_id": Int(0),
                        "ops": OBJECT,
                        "inputs": MapOf(TENSOR),
                        "outputs": MapOf(TENSOR),
                        "baked": Table(
                            {
                                "steps": Int(1),
                                "nfe": Int(1),
                                "time_grid": ListOf(Number()),
                                "mask_counts": ListOf(Int(0)),
                            },
                            extra=Scalar(),
                        ),
                    },
                    required=("graph", "artifact", "baked"),
                )
            )
        ),
        "flow_quality": Nullable(
            Table(
                {
                    "table": ListOf(
                        Table(
                            {"solver": Str(), "steps": Int(1), "nfe": Int(1), "snr_db": Number()},
                            required=("solver", "steps", "nfe", "snr_db"),
                        )
                    ),
                },
                required=("table",),
            )
        ),
        "graph": Nullable(MapOf(OBJECT)),
        "provenance": Nullable(OBJECT),
        "packed": Nullable(OBJECT),
    },
    required=("model", "io", "artifacts"),
)


def _found(value: Any) -> str:
    if value is _MISSING:
        return "nothing (the field is missing)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        what = "object" if isinstance(value, dict) else "list"
        text = repr(value)
        return f"{what} {text if len(text) <= 40 else text[:37] + '...'}"
    kind = {str: "string", int: "integer", float: "number"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"


def _remake(root: Path, where: str) -> str:
    """The command that writes the section ``where`` lies in anew."""
    section = re.split(r"[.\[]", where, maxsplit=1)[0]
    if section == "quantization":
        return f"re-quantize with `edgekit quantize {root}`, which records that section anew"
    if section == "engines":
        return f"rebuild the engine with `edgekit build {root} --rebuild`, or remove its entry"
    if section == "flow_quality":
        return f"measure it anew with `edgekit run {root} --latency-budget-ms MS`"
    return f"re-export the bundle with `edgekit export MODEL -o {root}`"


def _text_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\udcff" in the JSON): no file system path or library takes it
        return False
    return True


def _check_json_values(doc: Any) -> None:
    """Every number finite and every string (keys too) valid Unicode, anywhere in ``doc``: walked
    with a stack, not recursion (the parser already bounded the depth)."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise _Mismatch(where, "a finite number (JSON has no NaN or Infinity)", value)
        if isinstance(value, str) and not _text_ok(value):
            raise _Mismatch(where, "valid Unicode text", value)
        if isinstance(value, dict):
            for key, item in value.items():
                if not _text_ok(str(key)):
                    raise _Mismatch(where, "field names of valid Unicode text", str(key))
                stack.append((item, _join(where, str(key))))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(value))


def validate_manifest(manifest: Any, path: Path) -> None:
    """Check ``manifest`` against MANIFEST_SCHEMA and what ties its fields together (the model's
    name is printable, conditioning names graph inputs, the IO specs parse): a BundleError
    naming the field, the type expected and what was found."""
    hint = _remake(path.parent, "")
    try:
        _check_json_values(manifest)
        MANIFEST_SCHEMA.check(manifest, "")
    except _Mismatch as exc:
        where = exc.where.lstrip(".") or "(the document)"
        raise BundleError(
            f"manifest {path} field {where}: expected {exc.expected}, found {_found(exc.value)}",
            hint=_remake(path.parent, where),
        ) from None
    model = manifest["model"]
    if not model["name"].isprintable():
        raise BundleError(
            f"manifest {path} field model.name: expected printable text, found {_found(model['name'])}", hint=hint
        )
    for role in ("inputs", "outputs"):
        try:
            tensor_specs_from_json(manifest["io"][role])
        except Exception as exc:  # noqa: BLE001 - any malformed spec is the same user-facing error
            raise BundleError(
                f"manifest {path} field io.{role}: expected tensor specs, found one that does not parse ({exc})",
                hint=hint,
            ) from None
    inputs = manifest["io"]["inputs"]
    for name in model["meta"].get("conditioning") or {}:
        if name not in inputs:
            raise BundleError(
                f"manifest {path} field model.meta.conditioning: expected names of graph inputs "
                f"({', '.join(map(str, inputs))}), found {name!r}",
                hint=hint,
            )
