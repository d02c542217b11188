"""`edgekit inspect`: ``stage`` loads and verifies a bundle, ``render`` shows its manifest,
``float_set`` names the layers quantize kept float for other quantizers (NNCF, OpenVINO, ORT)."""

from edgekit.inspect.float_set import FORMATS as FLOAT_SET_FORMATS
from edgekit.inspect.render import print_bundle
from edgekit.inspect.stage import float_set_document, inspect_bundle

__all__ = ["FLOAT_SET_FORMATS", "float_set_document", "inspect_bundle", "print_bundle"]
