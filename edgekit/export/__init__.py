"""torch -> ONNX with static shapes, verified against torch (see ``export_bundle``)."""

from edgekit.export.config import ExportConfig, VerifyConfig

__all__ = ["ExportConfig", "VerifyConfig"]
