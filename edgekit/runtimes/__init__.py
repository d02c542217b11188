"""Backends behind one ``Runtime`` protocol, and the opener that picks one for a bundle.

Each backend module registers its entry in ``runtimes.registry`` (how it opens, its precisions,
the artifacts it loads, what it needs); importing this package imports the built-in ones (and
none of their heavy dependencies, which load when a runtime opens).
"""

from __future__ import annotations

from typing import Any

# ruff: noqa: I001 -- the built-in backends register in the vocabulary's order
from edgekit.bundle import Bundle
from edgekit.errors import UsageError
from edgekit.runtimes import ort, torch_ref, trt, openvino_engine, qnn, aihub  # noqa: F401  (register the built-in backends)
from edgekit.runtimes.base import BaseRuntime, Runtime, validate_feeds
from edgekit.runtimes.engines import find_engine
from edgekit.runtimes.registry import FileOptions, backend, check_precision, names
from edgekit.spec import check_graph_kind
from edgekit.vocabulary import PRECISIONS, RUNTIMES

__all__ = ["RUNTIMES", "PRECISIONS", "BaseRuntime", "Runtime", "open_fused", "open_runtime", "validate_feeds"]


def open_runtime(
    bundle: Bundle, runtime: str = "ort", precision: str = "fp32", *, threads: int = 0, target: str | None = None
) -> Runtime:
    """A ready ``Runtime`` for ``bundle``'s per-step network in ``precision``.

    With ``target`` the engine comes from the target's runtimes in order (``edgekit build``
    output for that target when present; a stale engine is refused: ``edgekit.builder.select_engine``
    rebuilds it), and ``runtime`` is ignored. Without it, the registry entry of ``runtime`` opens
    the bundle (``edgekit.runtimes.registry``: each runtime's help says what it runs):

    ort   — the bundle's ONNX artifact of that precision (``fp32``, or ``int8`` after quantize);
    torch — the PyTorch module rebuilt from the bundle's model source (fp32 only; needs the
            ``export`` extra): the reference and eager baseline;
    trt   — a TensorRT engine of the bundle built for this host;
    openvino — the bundle's ONNX compiled by OpenVINO on its CPU (fp32 and bf16: the fp32 ONNX
            at that inference precision; int8: the QDQ ONNX, float parts in f32).
    qnn   — Qualcomm's HTP (Hexagon NPU) backend of onnxruntime-qnn, emulated on x86: ``int8``
            is the bundle's int8 model from ``quantize --profile qnn``, ``fp16`` its fp32 model
            computed in float16 (HTP v73+); no fp32 (the NPU has none). Default SoC: 8 Gen 3.
    aihub — Qualcomm AI Hub's hosted devices: runs as jobs, never in this process (opening it
            says which command does what: build, profile, check with --runtime aihub).
    """
    if target is not None:
        return find_engine(bundle, target, precision).open(threads=threads)
    return check_precision(runtime, precision).open(bundle, precision, threads)


def open_fused(
    bundle: Bundle, graph: str, *, threads: int = 0, runtime: str = "ort", precision: str = "fp32"
) -> tuple[Runtime, dict[str, Any]]:
    """(runtime over the fused ``graph`` artifact, its manifest entry) of a loaded Bundle.

    Fused graphs are FP32 ONNX: each runtime with a graph opener runs them in its
    ``graph_precisions`` (ort: fp32 as written; openvino: f32 or bf16 inference precision)."""

    check_graph_kind(bundle.kind, graph)
    entry = bundle.fused.get(graph)
    if entry is None:
        have = ", ".join(bundle.fused) or "none"
        raise UsageError(
            f"bundle {bundle.root} has no fused {graph!r} graph (it has: {have}); "
            f"add one with `edgekit export MODEL -o {bundle.root} --graph {graph}`"
        )
    path = bundle.path_of(entry["artifact"])
    found = backend(runtime)
    if found.open_file is None or precision not in found.graph_precisions:
        runs = [f"{n} ({', '.join(backend(n).graph_precisions)})" for n in names() if backend(n).graph_precisions]
        raise UsageError(
            f"--graph {graph} runs the fused fp32 graph on {' or '.join(runs)}, not {runtime} {precision}",
            hint="use --runtime ort or openvino with --precision fp32 (openvino: or bf16), or --graph host",
        )
    return found.open_file(path, FileOptions(precision, threads)), dict(entry)
