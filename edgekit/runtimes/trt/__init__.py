"""TensorRT backend: build static-shape engines from ONNX, key them to the host, run them.

An engine only runs on the TensorRT version and GPU (and, on Jetson, the L4T/JetPack release)
that built it, so every ``.plan`` gets a sidecar ``<plan>.json`` (``EngineMetadata``) and
``load_engine`` refuses, listing every reason, or rebuilds when asked.

Written against the name-based IO API that TensorRT 8.5 introduced (``execute_async_v3``,
``set_tensor_address``), so it runs on JetPack 5 (8.5.2), JetPack 6.0 (8.6.2), JetPack 6.1/6.2
(10.3) and x86 wheels (10.x, 11.x). What differs between them is detected with ``hasattr`` on
the module, never from the version string alone (Polygraphy's way):

- 8.x: the ONNX parser casts INT64 graph IO down to INT32, so ``TrtRuntime`` keeps the graph's
  int64 contract and casts at the boundary (range-checked); no strongly typed networks, so an
  explicitly quantized (Q/DQ) graph builds weakly typed with ``BuilderFlag.INT8`` set;
  8.5 has no ``builder_optimization_level``.
- 10.x: INT64 IO, ``STRONGLY_TYPED`` networks (a Q/DQ graph builds strongly typed by default).
- 11.x: strongly typed only (no ``BuilderFlag.FP16/INT8``).

``tensorrt``, ``torch`` and ``cuda-python`` are imported lazily.

Modules: ``metadata`` (engine sidecars, host facts, compatibility), ``builder`` (flags per
version, ``build_engine``, timing cache), ``runtime`` (``load_engine``, ``TrtRuntime``),
``memory`` (CUDA device and buffers), ``backend`` (TensorRT's entry in the runtime registry).
"""

from edgekit.host import L4T_RELEASE_PATH, parse_l4t, read_l4t
from edgekit.runtimes.trt.backend import TRT, open_trt
from edgekit.runtimes.trt.builder import (
    BuildFlags,
    TrtBuildConfig,
    TrtFeatures,
    build_engine,
    onnx_has_qdq,
    resolve_build_flags,
)
from edgekit.runtimes.trt.memory import gpu_facts, select_device
from edgekit.runtimes.trt.metadata import (
    ENGINE_SCHEMA,
    PRECISIONS,
    REBUILD_HINT,
    EngineMetadata,
    HostMetadata,
    check_compatible,
    host_metadata,
    read_metadata,
    sha256_file,
    sidecar_path,
    write_metadata,
)
from edgekit.runtimes.trt.runtime import TrtRuntime, engine_mismatches, load_engine

__all__ = [
    "TRT",
    "open_trt",
    "BuildFlags",
    "ENGINE_SCHEMA",
    "EngineMetadata",
    "HostMetadata",
    "L4T_RELEASE_PATH",
    "PRECISIONS",
    "REBUILD_HINT",
    "TrtBuildConfig",
    "TrtFeatures",
    "TrtRuntime",
    "build_engine",
    "check_compatible",
    "engine_mismatches",
    "gpu_facts",
    "host_metadata",
    "load_engine",
    "onnx_has_qdq",
    "parse_l4t",
    "read_l4t",
    "read_metadata",
    "resolve_build_flags",
    "select_device",
    "sha256_file",
    "sidecar_path",
    "write_metadata",
]
