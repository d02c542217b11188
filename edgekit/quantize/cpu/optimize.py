"""The graph optimization ``quant_pre_process`` does, for a model whose weights pass protobuf's
2 GiB: ONNX Runtime optimizes from the files straight to files, and no Python copy of the model is
ever built.

``quant_pre_process`` loads the whole model into a ``ModelProto`` and keeps it while a session
optimizes a second copy: on the 2.25 GiB masked transformer it peaked at about 7.2 GB and left that
resident (``docs/large-models.md``). Over 2 GiB its symbolic shape inference cannot run anyway
(ONNX's checker stops at protobuf's limit), so what it does there is: basic ORT optimization
(MatMul + Add -> Gemm, which the quantizer's QGemm fusion needs), ONNX shape inference, and the
metadata that tells ``quantize_static`` the model was pre-processed. This does the same from
files: the session's ``optimized_model_filepath`` with the weights in one side file, shape
inference on the path, and the metadata on the graph alone. ``onnxruntime`` and ``onnx`` are
imported lazily."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._sidefiles import PROTOBUF_LIMIT, model_bytes, tensors_read_from
from edgekit.quantize.quiet import quiet_ort_logging

# What quant_pre_process records (onnxruntime.quantization.quant_utils.add_pre_process_metadata):
# quantize_static warns "consider pre-processing" on a model without it.
PRE_PROCESS_KEY, PRE_PROCESS_VALUE = "onnx.quant.pre_process", "onnxruntime.quant"


def over_protobuf_limit(path: Path) -> bool:
    """Whether the ONNX model at ``path`` (its graph and the side files it reads) is over 2 GiB."""
    return model_bytes(path) >= PROTOBUF_LIMIT


def symbolic_shapes(fp32_path: Path) -> Any:
    """``quant_pre_process``'s symbolic shape inference (its defaults) of the graph of
    ``fp32_path`` read without its weights: the ``ModelProto`` with the shapes it found, its
    initializers still naming the side files. quant_pre_process runs it on the whole model and
    copies it twice: F5-TTS's DiT (1.27 GiB of weights) peaked at 4.13 GiB, 3.2x, in a step that then
    failed. Raises what the inference raises (ReduceL2, the DiT: it stops on ops it does not know)."""
    onnx = require("onnx")
    ssi = require("onnxruntime.tools.symbolic_shape_infer")
    fp32_path = Path(fp32_path).resolve()
    graph = onnx.load(str(fp32_path), load_external_data=False)
    with quiet_ort_logging(), tensors_read_from(fp32_path.parent):  # a weight it reads: from its file
        return ssi.SymbolicShapeInference.infer_shapes(graph, 2**31 - 1, False, False, 0)


def optimize_from_files(fp32_path: Path, out_path: Path, graph: Any = None) -> Path:
    """Basic ORT optimization of ``fp32_path`` into ``out_path`` (weights in ``<name>.data``
    beside it), shapes inferred and marked pre-processed, as ``quant_pre_process`` with
    ``skip_symbolic_shape=True`` would write it. ``graph``: the graph to optimize instead of the
    file's (``symbolic_shapes``: then as quant_pre_process writes it), its weights read from the
    side files beside ``fp32_path``. Peak memory: the one session."""
    ort = require("onnxruntime")
    onnx = require("onnx")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.optimized_model_filepath = str(out_path)
    opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", out_path.name + ".data")
    opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    source: Any = str(fp32_path)
    if graph is not None:  # the graph's bytes (no weights in them), the weights where they are
        folder = str(Path(fp32_path).resolve().parent)
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
        source = graph.SerializeToString()
    with quiet_ort_logging():
        session = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    del session
    # The graph alone is read and written: the weights stay in the side file the session wrote.
    onnx.shape_inference.infer_shapes_path(str(out_path), str(out_path))
    model = onnx.load(str(out_path), load_external_data=False)
    if not any(p.key == PRE_PROCESS_KEY for p in model.metadata_props):
        entry = model.metadata_props.add()
        entry.key, entry.value = PRE_PROCESS_KEY, PRE_PROCESS_VALUE
    for tensor in model.graph.initializer if graph is not None else ():
        # ORT writes an empty doc_string into each external tensor, quant_pre_process (onnx) none;
        # the INT8 graph keeps the tensors the quantizer leaves float as it finds them, so this
        # graph is written as quant_pre_process writes it (and the optimization alone as before).
        if tensor.data_location == onnx.TensorProto.EXTERNAL and not tensor.doc_string:
            tensor.ClearField("doc_string")
    onnx.save_model(model, str(out_path))
    return out_path


__all__ = ["PRE_PROCESS_KEY", "optimize_from_files", "over_protobuf_limit", "symbolic_shapes"]


def name_every_node(path: Path) -> int:
    """Give each unnamed node of the ONNX model at ``path`` a name of its own (``<op>_<first
    output>``), and each repeat of a name a suffix; rewrites the graph in place (its weights stay
    where they are) and returns how many it named. The budget search and the manifest address
    nodes by name: a prepared graph where onnx inlined a function (F5-TTS's Mish: 6 nodes named
    "") could not have its candidates derived, so each ran ORT's quantizer (17 s at size)."""
    onnx = require("onnx")
    model = onnx.load(str(path), load_external_data=False)  # tensors kept as they are: in or out of the file
    taken = {n.name for n in model.graph.node if n.name}
    seen: set[str] = set()
    named = 0
    for node in model.graph.node:
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = node.name or f"{node.op_type}_{node.output[0] if node.output else 'node'}"
        name, i = base, 1
        while name in taken or name in seen:
            name, i = f"{base}_{i}", i + 1
        node.name = name
        taken.add(name)
        seen.add(name)
        named += 1
    if named:
        onnx.save(model, str(path))
    return named
