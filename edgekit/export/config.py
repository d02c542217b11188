"""Export and verification settings: defaults live here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass, field

MIN_OPSET = 17  # LayerNormalization is a single op from 17 on; TensorRT 8.6+ and ORT 1.14+ read it


@dataclass(frozen=True)
class VerifyConfig:
    random_samples: int = 3  # inputs drawn uniformly within each input's declared range
    trajectory_samples: int = 3  # inputs as the decode loop produces them (mid-decode masks, noisy x, filled KV caches)
    atol: float = 1e-4  # fp32 ORT vs torch: kernels differ in summation order, not more
    rtol: float = 1e-3  # relative to the largest reference magnitude of each output
    seed: int = 0


@dataclass(frozen=True)
class ExportConfig:
    opset: int = 18  # the torch.export-based exporter's native opset
    # Weights over this many MiB go to a side file (protobuf caps a file at 2 GB); None: the one
    # rule every written model follows (EDGEKIT_EXTERNAL_DATA_MB, default 64; edgekit._sidefiles).
    external_data_mb: float | None = None
    verify: VerifyConfig = field(default_factory=VerifyConfig)
