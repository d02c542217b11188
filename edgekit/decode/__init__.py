"""Decode loops written once against ``Runtime``, numpy only: MaskGIT, flow ODE solvers, AR."""

from edgekit.decode.ar import ARDecodeConfig, ARResult, decode_ar
from edgekit.decode.flow import (
    NFE_PER_STEP,
    SOLVERS,
    FlowDecodeConfig,
    FlowResult,
    decode_flow,
    integrate,
)
from edgekit.decode.masked import (
    MaskedDecodeConfig,
    MaskedResult,
    MaskedState,
    decode_masked,
)
from edgekit.decode.schedules import MASK_SCHEDULES, TIME_GRIDS, mask_ratio, time_grid

__all__ = [
    "ARDecodeConfig",
    "ARResult",
    "decode_ar",
    "NFE_PER_STEP",
    "SOLVERS",
    "FlowDecodeConfig",
    "FlowResult",
    "decode_flow",
    "integrate",
    "MaskedDecodeConfig",
    "MaskedResult",
    "MaskedState",
    "decode_masked",
    "MASK_SCHEDULES",
    "TIME_GRIDS",
    "mask_ratio",
    "time_grid",
]
