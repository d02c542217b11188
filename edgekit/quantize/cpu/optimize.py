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

from edgekit._deps import require
from edgekit._sidefiles import PROTOBUF_LIMIT, model_bytes
from edgekit.quantize.quiet import quiet_ort_logging

# What quant_pre_process records (onnxruntime.quantization.quant_utils.add_pre_process_metadata):
# quantize_static warns "consider pre-processing" on a model without it.
PRE_PROCESS_KEY, PRE_PROCESS_VALUE = "onnx.quant.pre_process", "onnxruntime.quant"


def over_protobuf_limit(path: Path) -> bool:
    """Whether the ONNX model at ``path`` (its graph and the side files it reads) is over 2 GiB."""
    return model_bytes(path) >= PROTOBUF_LIMIT


def optimize_from_files(fp32_path: Path, out_path: Path) -> Path:
    """Basic ORT optimization of ``fp32_path`` into ``out_path`` (weights in ``<name>.data``
    beside it), shapes inferred and marked pre-processed, as ``quant_pre_process`` with
    ``skip_symbolic_shape=True`` would write it. Peak memory: the one session."""
    ort = require("onnxruntime")
    onnx = require("onnx")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.optimized_model_filepath = str(out_path)
    opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", out_path.name + ".data")
    opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    with quiet_ort_logging():
        session = ort.InferenceSession(str(fp32_path), opts, providers=["CPUExecutionProvider"])
    del session
    # The graph alone is read and written: the weights stay in the side file the session wrote.
    onnx.shape_inference.infer_shapes_path(str(out_path), str(out_path))
    model = onnx.load(str(out_path), load_external_data=False)
    if not any(p.key == PRE_PROCESS_KEY for p in model.metadata_props):
        entry = model.metadata_props.add()
        entry.key, entry.value = PRE_PROCESS_KEY, PRE_PROCESS_VALUE
    onnx.save_model(model, str(out_path))
    return out_path


__all__ = ["PRE_PROCESS_KEY", "optimize_from_files", "over_protobuf_limit"]
