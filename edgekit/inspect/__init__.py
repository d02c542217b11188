"""`edgekit inspect`: ``stage`` loads and verifies a bundle, ``render`` shows its manifest."""

from edgekit.inspect.render import print_bundle
from edgekit.inspect.stage import inspect_bundle

__all__ = ["inspect_bundle", "print_bundle"]
