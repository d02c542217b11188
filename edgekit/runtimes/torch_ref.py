"""The PyTorch reference backend: the source module itself behind the ``Runtime`` protocol.

Used to verify exports and as the accuracy reference; not a deployment path (torch is heavy).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError, UsageError
from edgekit.runtimes.base import BaseRuntime, describe
from edgekit.spec import TensorSpec


class TorchRuntime(BaseRuntime):
    """Run ``module`` (a ``torch.nn.Module``) in eval mode on ``device``.

    ``forward`` gets the inputs positionally in the order of ``inputs`` and returns a tensor (one
    output) or a tuple/list with the outputs in the order of ``outputs``. The module is put in
    eval mode and moved to ``device`` in place (``nn.Module.to`` semantics). ``threads`` > 0: torch's
    intra-op threads during each ``run`` (torch's setting is process-wide: restored after), so a
    side-by-side with ORT at N threads compares like with like; 0 = torch's default.
    """

    name = "torch"

    def __init__(
        self,
        module: Any,
        inputs: Mapping[str, TensorSpec],
        outputs: Mapping[str, TensorSpec],
        device: str = "cpu",
        threads: int = 0,
    ):
        super().__init__(inputs, outputs)
        self._torch = require("torch")
        if not 0 <= int(threads) <= 1024:  # as OrtOptions.MAX_THREADS (torch spawns them up front)
            raise UsageError(f"--threads {threads} is invalid; valid: 0..1024 (0 = torch's default)")
        self.threads = int(threads)
        self.device = str(device)
        self.module = module.to(self.device).eval()

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self._torch
        args = [torch.from_numpy(np.ascontiguousarray(feeds[name])).to(self.device) for name in self.inputs]
        before = torch.get_num_threads()
        if self.threads > 0 and self.threads != before:
            torch.set_num_threads(self.threads)
        try:
            with torch.inference_mode():
                result = self.module(*args)
        finally:
            if torch.get_num_threads() != before:
                torch.set_num_threads(before)
        tensors = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(tensors) != len(self.outputs):
            raise EdgekitError(
                f"torch: forward returned {len(tensors)} tensor(s), the spec names {len(self.outputs)} "
                f"outputs ({describe(self.outputs)})",
                hint="return a tuple with the outputs in spec order (wrap the module in an adapter)",
            )
        out: dict[str, np.ndarray] = {}
        for (name, spec), tensor in zip(self.outputs.items(), tensors):
            array = tensor.detach().cpu().numpy().astype(spec.dtype, copy=False)  # (spec.shape)
            if tuple(array.shape) != spec.shape:
                raise EdgekitError(
                    f"torch: output {name!r} has shape {list(array.shape)}, the spec says {list(spec.shape)}",
                    hint="fix the ModelSpec outputs or the module's adapter",
                )
            out[name] = array
        return out

    def _close_impl(self) -> None:
        self.module = None
