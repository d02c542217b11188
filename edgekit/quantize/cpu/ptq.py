"""INT8 post-training quantization (QDQ) of a per-step graph with onnxruntime.quantization.

ORT does the work (``quant_pre_process``, ``quantize_static``, its calibrators); what it
quantizes comes from ``cpu.select.select_nodes``, and fallback layers become weight-only INT8
(``MatMulNBits``/dequantized weights) here. ``onnxruntime`` is imported lazily."""

from __future__ import annotations

import inspect
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import external_data_locations, place_side_files
from edgekit.errors import EdgekitError
from edgekit.quantize.calibrate import calibration_reader
from edgekit.quantize.calibrator import CallRanges, collect_ranges, write_calibration_cache
from edgekit.quantize.config import METHODS, QuantizeConfig
from edgekit.quantize.cpu.optimize import name_every_node, optimize_from_files, over_protobuf_limit, symbolic_shapes
from edgekit.quantize.cpu.select import select_nodes, select_tables, weight_only_by_rule
from edgekit.quantize.cpu.streamed import can_stream, quantize_streamed
from edgekit.quantize.cpu.tables import store_tables_int8
from edgekit.quantize.cpu.tensor_overrides import attention_score_overrides, pair_bound_overrides
from edgekit.quantize.graph import FLOAT, GraphPlan, analyse_graph
from edgekit.quantize.names import Lineage
from edgekit.quantize.quiet import quiet_ort_logging
from edgekit.runtimes.onnx_file import needs_side_file, save_onnx, save_with_one_side_file


# ---- preparation and analysis ------------------------------------------------------------------
def prepare_model(fp32_path: Path, out_path: Path, preprocess: bool = True) -> tuple[Path, str | None, str]:
    """``_prepare``, then every node of the prepared graph named once (``name_every_node``: onnx
    leaves the nodes of an inlined function unnamed, and candidates are derived by node name)."""
    prepared, skipped, how = _prepare(fp32_path, out_path, preprocess)
    name_every_node(prepared)
    return prepared, skipped, how


def _prepare(fp32_path: Path, out_path: Path, preprocess: bool = True) -> tuple[Path, str | None, str]:
    """``quant_pre_process`` (symbolic shape inference + ORT basic optimization, which turns
    MatMul+Add into Gemm: ORT CPU fuses only DQ->Gemm into QGemm) into ``out_path``; or a plain
    copy with ONNX shape inference when ``preprocess`` is False.

    Returns (path, what failed or was skipped, or None; how it was prepared: "quant_pre_process",
    "ort-optimization" or "none"). When ``quant_pre_process`` fails (ORT's symbolic shape
    inference stops on ops it does not know, e.g. ReduceL2 in a GlobalResponseNorm), ORT's graph
    optimization runs alone (``optimize_from_files``); only if that fails too is the graph
    quantized unoptimized: slower INT8 kernels where MatMul+Add stays unfused, never a crash."""
    big = needs_side_file(fp32_path)
    if not preprocess:
        return _plain_copy(fp32_path, out_path, big), "--no-preprocess", "none"
    if over_protobuf_limit(fp32_path):
        # quant_pre_process holds two copies of the model in memory (7.2 GB peak at 2.25 GiB) and
        # its symbolic shape inference cannot run over 2 GiB: the same optimization from files.
        try:
            return optimize_from_files(fp32_path, out_path), None, "ort-optimization"
        except Exception as exc:  # ORT refuses the graph: the plain copy, said as for the small path
            _remove_model(out_path)
            return _plain_copy(fp32_path, out_path, big), f"ORT's graph optimization failed ({_why(exc)})", "none"
    try:
        _pre_process(fp32_path, out_path, big)
        return out_path, None, "quant_pre_process"
    except Exception as exc:  # ORT's shape inference raises anything from assertions to KeyError
        skipped = f"quant_pre_process failed ({_why(exc)})"
        _remove_model(out_path)
    # What fails is nearly always its symbolic shape inference (ReduceL2, F5-TTS's DiT: a
    # TypeError); the optimization it exists for still runs without it. Unoptimized, ORT fuses
    # MatMul+Add into Gemm at load *behind* the weights' DequantizeLinear, which then runs on
    # every call: F5-TTS's DiT in INT8 ran 2.2x slower than FP32 (DQ 43 % of kernel time).
    try:
        return optimize_from_files(fp32_path, out_path), skipped, "ort-optimization"
    except Exception as exc:  # ORT refuses the graph too: the plain copy
        _remove_model(out_path)
        skipped += f"; ORT's graph optimization failed too ({_why(exc)})"
        return _plain_copy(fp32_path, out_path, big), skipped, "none"


def _pre_process(fp32_path: Path, out_path: Path, big: bool) -> None:
    """``quant_pre_process`` of ``fp32_path`` into ``out_path``; of a model with its weights in a
    side file, its steps from files: it loads the whole model, and its symbolic shape inference
    copies it twice (F5-TTS's DiT, 1.27 GiB of weights: 4.13 GiB, 3.2x, for a step that then
    failed), where the inference needs the graph alone and ORT's optimization reads the weights
    from their file (``optimize.symbolic_shapes``): the same prepared graph
    (``tests/quantize/cpu/test_optimize.py``)."""
    if big:
        optimize_from_files(fp32_path, out_path, graph=symbolic_shapes(fp32_path))
        return
    quant_pre_process = require("onnxruntime.quantization.shape_inference").quant_pre_process
    with quiet_ort_logging():
        quant_pre_process(str(fp32_path), str(out_path))


def _plain_copy(fp32_path: Path, out_path: Path, big: bool) -> Path:
    """The graph alone, shapes inferred (a help to the quantizer; ORT infers the rest itself),
    written beside a copy of the fp32 weights where they are in a side file."""
    onnx = require("onnx")
    model = onnx.load(str(fp32_path), load_external_data=not big)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:
        pass
    if big:  # a copy: quantize_static and the post-passes load it with onnx, which refuses a linked file
        place_side_files(fp32_path, out_path.parent, link=False)
    save_onnx(model, out_path, external=False if big else None)
    return out_path


def _remove_model(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".data").unlink(missing_ok=True)


def _why(exc: BaseException) -> str:
    """``Type: first line`` of ``exc``, at most 160 characters of it."""
    first = (str(exc).strip().splitlines() or [""])[0][:160]
    return f"{type(exc).__name__}{': ' + first if first else ''}"


# ---- quantization ------------------------------------------------------------------------------
def supports_calibration_cache() -> bool:
    quant = require("onnxruntime.quantization")
    return "calibration_cache_path" in inspect.signature(quant.quantize_static).parameters


def calibrate(
    prepared: Path,
    reader: Any,
    cfg: QuantizeConfig,
    cache: Path,
    calls: CallRanges | None = None,
    each: Callable[[int], None] | None = None,
    known: CallRanges | None = None,
) -> bool:
    """The ranges ORT's calibrator for ``cfg.calibrator`` computes over every recorded feed of all
    tensors of ``cfg.op_types`` nodes, saved to ``cache`` (ORT's own cache format), which every
    ``quantize_model`` call of the run then reads instead of calibrating again. Gathered call by
    call over one session that reads the weights from ``prepared``'s own file (``quantize/calibrator.py``): ORT's
    calibrator would hold a Python copy of the weights beside its session's (7.0 GB peak at 2.25
    GiB of weights), and the histogram methods every call's tensors. False (nothing written) on an
    onnxruntime without ``quantize_static(calibration_cache_path=...)``. ``calls``: each call's
    max |x| of every calibrated tensor kept too, for ``range_drift``; ``each(i)``: after the i-th call
    (two passes over the calls for entropy and percentile, one where ``known`` holds a minmax
    pass's ranges over the same calls)."""
    if not supports_calibration_cache():
        return False
    found = collect_ranges(
        Path(prepared),
        reader,
        cfg.calibrator,
        cfg.op_types,
        cfg.percentile,
        cfg.threads,
        calls,
        each,
        known,
        cfg.settings.quantized_outputs,  # the outputs quantize_model quantizes: no other's range is read
    )
    write_calibration_cache(found, cache)
    return True


def quantize_model(
    prepared: Path,
    out: Path,
    reader: Any,
    nodes: Sequence[str],
    cfg: QuantizeConfig,
    plan: GraphPlan,
    calibration_cache: Path | None = None,
    weight_only: Sequence[str] = (),
    tables: Sequence[str] = (),
) -> None:
    """ORT's ``quantize_static`` (QDQ) of exactly ``nodes`` of ``prepared`` into ``out`` (with the
    weights in a side file: its quantizer streamed, ``_run_quantizer``); the nodes of
    ``weight_only`` not in ``nodes`` get INT8 weights (float activations, float compute); the
    Gathers of ``tables`` read their embedding table in int8 (``cpu/tables.py``). Which float
    nodes may be weight-only (profile, rule vs budget vs --exclude) and which tables are int8
    (``select.select_tables``) the caller decides.

    reader: a rewindable CalibrationDataReader (``TrajectoryReader``). calibration_cache: ranges
    from ``calibrate`` (or, when absent, where ORT saves the ones it computes), so fallback
    iterations re-run the quantizer only; ORT < 1.32 recalibrates every call. An empty ``nodes``
    writes the float graph: ORT reads an empty list as "quantize everything"."""
    s = cfg.settings
    float_weighted = [n for n in weight_only if n not in set(nodes)]
    if not nodes:
        shutil.copyfile(prepared, out)
        _weight_only(out, float_weighted)
        store_tables_int8(out, tables)
        return
    quant = require("onnxruntime.quantization")
    by_name = plan.by_name()
    # The calibrator observes every node of these types, so one cache serves every subset.
    op_types = sorted({by_name[n].op_type for n in nodes} | set(cfg.op_types))
    extra: dict[str, Any] = {
        "ActivationSymmetric": s.activation_symmetric,
        "WeightSymmetric": s.weight_symmetric,
        "QuantizeBias": s.quantize_bias,
        "OpTypesToExcludeOutputQuantization": [t for t in op_types if t not in s.quantized_outputs],
    }
    if cfg.calibrator == "percentile":
        extra["CalibPercentile"] = cfg.percentile
    overrides = pair_bound_overrides(prepared, nodes) if s.weight_bound == "pair" else {}
    overrides |= attention_score_overrides(plan, nodes, cfg)
    if overrides:
        extra["TensorQuantOverrides"] = overrides
    common: dict[str, Any] = dict(
        op_types_to_quantize=op_types,
        per_channel=s.per_channel,
        reduce_range=s.reduce_range,
        activation_type=getattr(quant.QuantType, s.activation_type),
        weight_type=getattr(quant.QuantType, s.weight_type),
        calibrate_method=getattr(quant.CalibrationMethod, METHODS[cfg.calibrator]),
        extra_options=extra,
    )
    reader.rewind()
    try:
        with quiet_ort_logging():
            _run_quantizer(prepared, out, reader, nodes, calibration_cache, common)
    except (ValueError, RuntimeError) as exc:
        raise EdgekitError(
            (
                f"onnxruntime quantize_static failed on {prepared.name} ({cfg.profile}, {cfg.calibrator}): "
                f"{str(exc).splitlines()[0][:300]}"
            ),
            hint="try --method minmax, or --exclude the node named in the message",
        ) from None
    _float_inputs_for_float_nodes(out, set(nodes), s.quantized_outputs)
    _weight_only(out, float_weighted)
    store_tables_int8(out, tables)


def _run_quantizer(
    prepared: Path, out: Path, reader: Any, nodes: Sequence[str], cache: Path | None, common: dict[str, Any]
) -> None:
    """ORT's QDQ quantizer of ``nodes`` (``common``: ``quantize_static``'s other arguments). With
    the weights in a side file and the ranges cached, the FP32 weights are read one at a time
    instead of the whole model loaded beside its INT8 copy (``cpu/streamed.py``: the same graph)."""
    quant = require("onnxruntime.quantization")
    cache = cache if cache is not None and supports_calibration_cache() else None  # ORT < 1.32: none
    if cache is not None and can_stream(prepared, out, cache):
        if quantize_streamed(prepared, out, cache, nodes=nodes, **common):
            return
    quant.quantize_static(
        str(prepared),
        str(out),
        reader,
        quant_format=quant.QuantFormat.QDQ,
        nodes_to_quantize=list(nodes),
        use_external_data_format=needs_side_file(prepared),
        **common,
        **({"calibration_cache_path": str(cache)} if cache is not None else {}),
    )


def _weight_only(path: Path, names: Sequence[str]) -> None:
    """Store the constant weight (input 1) of each node in ``names`` as symmetric per-output-
    channel int8 behind a DequantizeLinear: the node still computes in float on float
    activations. Weights shared with other nodes, or not plain initializers, are left alone."""
    onnx = require("onnx")
    numpy_helper, helper = onnx.numpy_helper, onnx.helper
    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    uses = Counter(i for n in model.graph.node for i in n.input)
    wanted = set(names)
    new_nodes = []
    for node in model.graph.node:
        if node.name not in wanted or len(node.input) < 2:
            continue
        w_name = node.input[1]
        init = inits.get(w_name)
        if init is None or uses[w_name] != 1 or init.data_type != FLOAT:
            continue
        w = numpy_helper.to_array(init)
        if node.op_type == "Conv":
            axis = 0  # (Cout, Cin/g, *k)
        elif node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
            axis = 0  # (N, K)
        else:
            axis = w.ndim - 1  # MatMul / Gemm B: (K, N)
        reduce = tuple(a for a in range(w.ndim) if a != axis)
        scale = (np.abs(w).max(axis=reduce) / 127.0).astype(np.float32)
        scale[scale == 0] = 1.0
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
        base = f"{w_name}_weight_only"
        model.graph.initializer.remove(init)
        model.graph.initializer.extend(
            [
                numpy_helper.from_array(q, f"{base}_quantized"),
                numpy_helper.from_array(scale, f"{base}_scale"),
                numpy_helper.from_array(np.zeros(scale.shape, np.int8), f"{base}_zero_point"),
            ]
        )
        new_nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [f"{base}_quantized", f"{base}_scale", f"{base}_zero_point"],
                [w_name],
                name=f"{base}_DequantizeLinear",
                axis=axis,
            )
        )
    if new_nodes:
        for dq in reversed(new_nodes):  # producers first: keep the graph topologically sorted
            model.graph.node.insert(0, dq)
        save_onnx(model, path, external=needs_side_file(path))


def _float_inputs_for_float_nodes(path: Path, int8: set[str], quantized_outputs: Sequence[str]) -> None:
    """ORT gives a tensor one Q/DQ pair and rewires *all* its consumers to the DQ output, also
    the ones it was told not to quantize (``h`` read by an INT8 ``q_proj`` and a float
    ``k_proj``). Point those back at the float tensor. DQs of outputs the profile quantizes on
    purpose (CPU: Conv, for QLinearConv) stay: their consumers are why the Q is there."""
    onnx = require("onnx")
    model = onnx.load(str(path), load_external_data=False)  # rewires the graph: weights stay where they are
    inits = {i.name for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    source: dict[str, str] = {}  # activation DQ output -> the float tensor its Q reads
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] in inits:
            continue
        q = producer.get(node.input[0])
        if q is None or q.op_type != "QuantizeLinear":
            continue
        origin = producer.get(q.input[0])
        if origin is not None and origin.name in int8 and origin.op_type in quantized_outputs:
            continue
        source[node.output[0]] = q.input[0]
    changed = False
    for node in model.graph.node:
        if node.name in int8 or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for slot, name in enumerate(node.input):
            if name in source:
                node.input[slot] = source[name]
                changed = True
    if changed:
        onnx.save(model, str(path))


def quantize_unbudgeted(
    fp32_path: Path, out_path: Path, feeds: Sequence[Mapping[str, np.ndarray]], cfg: QuantizeConfig | None = None
) -> Path:
    """INT8 QDQ of every node ``cfg`` selects (default: the ``cpu`` profile's), no accuracy budget
    and no fallback, calibrated on ``feeds`` (recorded decode calls). For *timing* graphs no
    budget can be checked for: the profiler's architecture-only (random-weight) models at other
    sequence lengths, whose INT8 kernels cost what the trained model's would. A model with its
    weights in a side file is written with one of its own beside ``out_path`` (``<name>.data``)."""

    cfg = cfg or QuantizeConfig()
    with tempfile.TemporaryDirectory(prefix="edgekit-quantize-") as tmp:
        prepared, _, _ = prepare_model(Path(fp32_path), Path(tmp) / "prepared.onnx", cfg.preprocess)
        plan = analyse_graph(prepared, None, lineage=Lineage.read(Path(fp32_path), prepared))
        nodes, floated = select_nodes(plan, cfg)
        weight_only = weight_only_by_rule(floated, cfg)
        tables, _ = select_tables(plan, cfg)
        staged = Path(tmp) / "int8.onnx"
        reader = calibration_reader(feeds)
        quantize_model(prepared, staged, reader, nodes, cfg, plan, weight_only=weight_only, tables=tables)
        if external_data_locations(staged):
            # Its weights live in side files in this folder (and maybe the prepared model's), gone
            # with it: the model at ``out_path`` gets one of its own, ``<name>.data``.
            save_with_one_side_file(staged, Path(out_path))
        else:
            shutil.move(str(staged), str(out_path))
    return Path(out_path)
