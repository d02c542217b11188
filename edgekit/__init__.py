"""edgekit: export, quantize, build, run and check non-autoregressive generative models on edge
devices. Importing edgekit imports no heavy dependency."""

from edgekit.spec import ModelSpec, TensorSpec

__version__ = "0.1.0"
__all__ = ["ModelSpec", "TensorSpec", "__version__"]
