"""torch -> ONNX with static shapes, verified against torch.

``onnx_export``: one module to one ONNX file (torch imported lazily); ``verify``: ONNX vs torch;
``to_bundle``: a bundle with the verified fp32 graph (``export_bundle``); ``fused``: the graphs
with the decode update inside (``--graph step|unrolled``), built as torch modules in
``fused_graphs``; ``chunk``: the chunk window of a flow model (``--chunk-frames``); ``stage``: the
command's request checked and run (``export_model``); ``render``: the console tables.
"""

from edgekit.export.chunk import window_spec
from edgekit.export.config import ExportConfig, VerifyConfig
from edgekit.export.fused import baked_options, fused_bundle
from edgekit.export.onnx_export import export_onnx
from edgekit.export.stage import ExportRequest, export_model
from edgekit.export.to_bundle import export_bundle
from edgekit.spec import check_graph_kind

__all__ = [
    "ExportConfig",
    "ExportRequest",
    "export_model",
    "VerifyConfig",
    "baked_options",
    "check_graph_kind",
    "export_bundle",
    "export_onnx",
    "fused_bundle",
    "window_spec",
]
