"""The one schema of ``edgekit.json``: every field a stage reads, with its JSON type, checked when
a bundle loads, before any stage touches the manifest. A field of the wrong type is one line:
``manifest <path> field model.meta.conditioning: expected an object, found list [1, 2]``.

Fields this edgekit does not know (written by a newer one) are ignored, never an error: a bundle
stays readable across versions as long as what is known keeps its type.

Everything a stage reads is here, down to what ``debug --fix`` re-quantizes with
(``quantization.config``) and the step buckets a runtime opens (``quantization.step_buckets``):
counts and seeds within the bounds the options have (``limits``), and anywhere in the document
numbers are finite and text is valid Unicode (edgekit writes neither NaN nor lone surrogates;
a manifest holding them was edited, and no later save could write it back). The types a field
may have, and those document-wide checks, are in ``manifest_types``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from edgekit.errors import BundleError
from edgekit.host import ISA_CLASSES
from edgekit.limits import MAX_ROWS, MAX_SAMPLES, MAX_SEED, MAX_THREADS
from edgekit.manifest_types import (
    DECODE,
    FILE,
    HASH,
    NAME,
    OBJECT,
    SIDE_FILE,
    TENSOR,
    Bool,
    Int,
    IntOr,
    ListOf,
    MapOf,
    Mismatch,
    Nullable,
    Number,
    OneOf,
    Scalar,
    Str,
    Table,
    Uncond,
    check_json_values,
    found,
)
from edgekit.spec import GRAPHS, GROUND_TRUTH_TASKS, KIND_META, KINDS, tensor_specs_from_json
from edgekit.vocabulary import SPEED_VERDICTS

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
        "attention_scores": Str(),
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
                    # The layers kept float, with the names other tools know them by (older bundles: no names).
                    "selection": Table(
                        {"float": ListOf(Table({"fp32_nodes": ListOf(Str()), "module": Nullable(Str())}))}
                    ),
                    "step_buckets": Nullable(STEP_BUCKETS),
                    # Each int8 artifact's files as quantize wrote them (graph, side files); none in older bundles.
                    "int8_files": Nullable(MapOf(ListOf(SIDE_FILE))),
                    "speed": Nullable(
                        Table(
                            {
                                "measured": Bool(),
                                "isa": Nullable(Str()),
                                "runtime": Nullable(Str()),
                                "int8_speedup": Nullable(Number()),
                                "verdict": Nullable(OneOf(*SPEED_VERDICTS)),
                                "unsure": ListOf(Str()),
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
                        # ORT: what edgekit changed in the graph file, and the session options an app loads it
                        # with (builder/ort.py).
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


def validate_manifest(manifest: Any, path: Path) -> None:
    """Check ``manifest`` against MANIFEST_SCHEMA and what ties its fields together (the model's
    name is printable, conditioning names graph inputs, the IO specs parse): a BundleError
    naming the field, the type expected and what was found."""
    hint = _remake(path.parent, "")
    try:
        check_json_values(manifest)
        MANIFEST_SCHEMA.check(manifest, "")
    except Mismatch as exc:
        where = exc.where.lstrip(".") or "(the document)"
        raise BundleError(
            f"manifest {path} field {where}: expected {exc.expected}, found {found(exc.value)}",
            hint=_remake(path.parent, where),
        ) from None
    model = manifest["model"]
    if not model["name"].isprintable():
        raise BundleError(
            f"manifest {path} field model.name: expected printable text, found {found(model['name'])}", hint=hint
        )
    for role in ("inputs", "outputs"):
        try:
            tensor_specs_from_json(manifest["io"][role])
        except Exception as exc:  # noqa: BLE001 - any malformed spec is the same user-facing error
            raise BundleError(
                f"manifest {path} field io.{role}: expected tensor specs, found one that does not parse ({exc})",
                hint=hint,
            ) from None
    # What the decode loop and the metrics read of the kind's metadata (``spec.KIND_META``):
    # a manifest without it is refused here, not as a KeyError deep inside a stage.
    missing = [k for k in KIND_META.get(model["kind"], ()) if k != "conditioning" and k not in model["meta"]]
    if missing:
        raise BundleError(
            f"manifest {path} field model.meta: a {model['kind']} model's metadata lacks {', '.join(missing)}",
            hint=hint,
        )
    inputs = manifest["io"]["inputs"]
    for name in model["meta"].get("conditioning") or {}:
        if name not in inputs:
            raise BundleError(
                f"manifest {path} field model.meta.conditioning: expected names of graph inputs "
                f"({', '.join(map(str, inputs))}), found {name!r}",
                hint=hint,
            )
