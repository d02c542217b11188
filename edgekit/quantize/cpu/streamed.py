"""ORT's QDQ quantizer over a model whose weights stay in their side file: each FP32 weight is read
from the file when the quantizer reads it and dropped after, so memory holds the graph and the
INT8 weights as they are made, never the FP32 weights.

Why: ``quantize_static`` first loads the whole model, weights included, into a ``ModelProto``
(``load_model_with_shape_infer``) and keeps it while it builds the INT8 copy beside it. On F5-TTS's
DiT (1.27 GiB of FP32 weights) that step held 1.95 GiB, 1.53x the weights; read this way, 0.71
GiB (``docs/large-models.md``, "Where quantize's memory goes").

What runs is ``quantize_static``'s own tail for a QDQ model whose ranges are in a calibration
cache (the only case quantize has once ``ptq.calibrate`` has written one): the graph with its
shapes inferred, ``update_opset_version``, ``QDQQuantizer(...).quantize_model()`` and
``save_model_to_file``. Only the load differs: the graph is read without its weights, whose
initializers keep naming their side file. ORT's quantizer reads a weight through
``onnx.numpy_helper.to_array``, which reads an external tensor relative to the working directory
and, in the onnx this was measured with (1.23), without keeping it in the tensor (an onnx that
keeps it writes the same graph with the old peak). So the quantizer runs with the working
directory at the model's folder.

The graph written is the one ``quantize_static`` writes, tensor for tensor
(``tests/quantize/cpu/test_streamed.py``); the FP32 initializers it leaves float (norms, the
float nodes' weights) keep naming the prepared model's side file beside it, as a derived candidate
does (``cpu/derive.py``), and are copied into the bundle's one side file when it is recorded.
Where this path does not apply (no side file, no cache, an opset ORT would convert, another
folder) ``quantize_static`` runs as before.

ORT computes each weight's scale and zero point per output channel in a Python loop (Sana-600M:
1.2 M channels, 27 s of a 50 s ``quantize_static``). Those depend on the weights, the node set and
the settings, never on the activation ranges, so the parameters one call computed serve the next
call over the same prepared graph, node set and settings (``--method auto``'s percentile
candidate after minmax's): ``_Remembered``, one entry, a copy handed out each time, as ORT then
adjusts the scales where an int32 bias would overflow. ``onnxruntime`` and ``onnx`` are imported
lazily."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._sidefiles import external_data_locations, tensors_read_from
from edgekit.quantize.cpu.weight_params import fast_params, whole_array_initializers


def can_stream(prepared: Path, out: Path, cache: Path | None) -> bool:
    """Whether ``quantize_streamed`` applies: ``prepared`` reads its weights from a side file, the
    ranges are in an existing ``cache``, and ``out`` is written beside ``prepared`` (the float
    weights it keeps name the prepared model's side file by a path relative to the graph)."""
    return (
        cache is not None
        and Path(cache).is_file()
        and Path(out).resolve().parent == Path(prepared).resolve().parent
        and bool(external_data_locations(Path(prepared)))
    )


def quantize_streamed(
    prepared: Path,
    out: Path,
    cache: Path,
    *,
    nodes: Sequence[str],
    op_types_to_quantize: Sequence[str],
    per_channel: bool,
    reduce_range: bool,
    activation_type: Any,
    weight_type: Any,
    calibrate_method: Any,
    extra_options: dict[str, Any],
) -> bool:
    """Write at ``out`` (with ``<out>.onnx.data`` beside it) what ``quantize_static(prepared, out,
    calibration_cache_path=cache, quant_format=QDQ, use_external_data_format=True, ...)`` writes,
    with the FP32 weights read one at a time from ``prepared``'s side file (the arguments are
    ``quantize_static``'s, as ``ptq.quantize_model`` passes them). False, nothing written, where
    ORT would first convert the model to another opset (that copy holds the weights anyway: the
    caller runs ``quantize_static``)."""
    onnx = require("onnx")
    quant = require("onnxruntime.quantization")
    utils = require("onnxruntime.quantization.quant_utils")
    calibrate = require("onnxruntime.quantization.calibrate")
    qdq: Any = require("onnxruntime.quantization.qdq_quantizer")
    checks = require("onnxruntime.quantization.quantize")

    prepared, out = Path(prepared).resolve(), Path(out).resolve()
    # load_model_with_shape_infer, less the weights: shapes inferred file to file (the graph
    # alone passes through onnx), the initializers left naming the side file.
    inferred = prepared.with_name(prepared.stem + "-inferred.onnx")
    try:
        onnx.shape_inference.infer_shapes_path(str(prepared), str(inferred))
        model = onnx.load(str(inferred), load_external_data=False)
    finally:
        inferred.unlink(missing_ok=True)
    utils.add_infer_metadata(model)
    overrides = extra_options.get("TensorQuantOverrides")
    kept = utils.update_opset_version(model, weight_type, activation_type, tensor_quant_overrides=overrides)
    if kept is not model:
        return False
    ranges = calibrate.load_tensors_data(Path(cache))
    if ranges.calibration_method != calibrate_method:
        raise ValueError(
            f"calibration cache {Path(cache).name} holds {ranges.calibration_method} ranges, "
            f"not {calibrate_method}: delete it or pass the matching method"
        )
    checks.check_static_quant_arguments(quant.QuantFormat.QDQ, activation_type, weight_type)
    # The calibrator's options (Calib*) shape the ranges, which the weights' parameters never read.
    quantizer_options = sorted((k, v) for k, v in extra_options.items() if not k.startswith("Calib"))
    settings = (per_channel, reduce_range, weight_type, activation_type, repr(quantizer_options))
    key: tuple[Any, ...] | None = (_graph_identity(prepared), settings, tuple(nodes), tuple(op_types_to_quantize))
    if "TensorQuantOverrides" in extra_options:  # their arrays print abridged: no key names them
        key = None
    with tensors_read_from(prepared.parent):
        quantizer = _remembering(qdq, key)(
            model,
            per_channel,
            reduce_range,
            weight_type,
            activation_type,
            ranges,
            list(nodes),
            [],
            list(op_types_to_quantize),
            extra_options,
        )
        orts = qdq.quantize_onnx_initializer
        qdq.quantize_onnx_initializer = whole_array_initializers(orts)  # for this call only
        try:
            quantizer.quantize_model()
        finally:
            qdq.quantize_onnx_initializer = orts
        quantizer.model.save_model_to_file(str(out), True)
    return True


class _Remembered:
    """The last call's weight parameters (``_calc_initializer_quant_params``) and what they were
    computed for: a key naming the prepared graph, the settings and the tensors ORT quantizes."""

    key: Any = None
    params: Any = None


def _graph_identity(prepared: Path) -> tuple[Any, ...]:
    """The prepared graph and its side files, by path, size and modification time."""
    files = [prepared, *(prepared.parent / name for name in sorted(external_data_locations(prepared)))]
    return tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists())


def _remembering(qdq: Any, key: tuple[Any, ...] | None) -> Any:
    """ORT's ``QDQQuantizer`` whose weight parameters are the last call's where ``key`` (None: never)
    and the tensors it quantizes are the same (module docstring), else computed, the per-channel
    weights over whole arrays (``weight_params.fast_params``), and kept."""

    class RememberingQuantizer(qdq.QDQQuantizer):
        def _calc_initializer_quant_params(self) -> Any:
            quantized = tuple(
                (name, str(info.tensor_type), info.axis, info.data_type, info.is_shared)
                for name, info in sorted(self.tensors_to_quantize.items())
            )
            if key is not None and _Remembered.key == (key, quantized):
                return copy.deepcopy(_Remembered.params)
            params = _computed(self, super()._calc_initializer_quant_params)
            if key is not None:
                _Remembered.key, _Remembered.params = (key, quantized), copy.deepcopy(params)
            return params

    return RememberingQuantizer


def _computed(quantizer: Any, orts: Any) -> dict[str, Any]:
    """``quantizer``'s weight parameters: the per-channel ones ``fast_params`` computes over whole
    arrays, the rest by ORT's own ``orts`` over the other tensors, in ORT's order."""
    everything = quantizer.tensors_to_quantize
    fast = {name: p for name, info in everything.items() if (p := fast_params(quantizer, name, info)) is not None}
    quantizer.tensors_to_quantize = {name: info for name, info in everything.items() if name not in fast}
    try:
        rest = orts()
    finally:
        quantizer.tensors_to_quantize = everything
    return {name: fast[name] if name in fast else rest[name] for name in everything if name in fast or name in rest}


__all__ = ["can_stream", "quantize_streamed"]
