"""The PyTorch reference backend: the source module itself behind the ``Runtime`` protocol.

Used to verify exports and as the accuracy reference; not a deployment path (torch is heavy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError, UsageError
from edgekit.models import load_bundle_spec
from edgekit.runtimes.base import BaseRuntime, RuntimeProxy, describe
from edgekit.runtimes.registry import Backend, DebugHooks, Requirement, register_backend
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


# ---- the registry entry -----------------------------------------------------------------------
def open_torch(bundle: Any, precision: str, threads: int = 0) -> TorchRuntime:
    """The PyTorch module rebuilt from ``bundle``'s model source (fp32)."""
    source = bundle.source or bundle.name
    batch = next(iter(bundle.inputs.values())).shape[0]
    spec = load_bundle_spec(bundle, batch=batch)  # the manifest names that code: it runs only if trusted
    if bundle.meta.get("chunk") and _window_of(spec.inputs, bundle.inputs) and _window_of(spec.outputs, bundle.outputs):
        # A chunk window bundle (`export --chunk-frames`): the same module at the window's frame
        # count, as exported (its forward takes the shorter length; export verified it does).
        return TorchRuntime(spec.module, bundle.inputs, bundle.outputs, threads=threads)
    if dict(spec.inputs) != bundle.inputs or dict(spec.outputs) != bundle.outputs:
        raise UsageError(
            f"model source {source!r} no longer matches bundle {bundle.root} (its IO changed since export)",
            hint=f"re-export with `edgekit export {source} -o {bundle.root}`",
        )
    return TorchRuntime(spec.module, spec.inputs, spec.outputs, threads=threads)


def _window_of(model: Any, window: Any) -> bool:
    """Whether ``window``'s tensors are ``model``'s with only the frame axis (1) shorter or equal."""
    if list(model) != list(window):
        return False
    for name, m in model.items():
        w = window[name]
        if m.dtype != w.dtype or len(m.shape) != len(w.shape) or (len(m.shape) > 1 and w.shape[1] > m.shape[1]):
            return False
        if [d for i, d in enumerate(m.shape) if i != 1] != [d for i, d in enumerate(w.shape) if i != 1]:
            return False
    return True


class HookedTorch(RuntimeProxy):
    """The torch module with forward hooks: ``run`` adds each hooked module's output under the
    tensor name it stands for ({tensor: module})."""

    def __init__(self, inner: TorchRuntime, modules: Mapping[str, Any]):
        super().__init__(inner, name="torch (hooked)")
        self.seen: dict[str, np.ndarray] = {}
        self.handles = [m.register_forward_hook(self._hook(t)) for t, m in modules.items()]

    def _hook(self, tensor: str):
        def keep(module: Any, args: Any, output: Any) -> None:
            first = output[0] if isinstance(output, (tuple, list)) else output
            self.seen[tensor] = first.detach().cpu().numpy().astype(np.float32, copy=True)

        return keep

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.seen = {}
        return dict(self.inner.run(feeds)) | self.seen

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        super().close()


def open_hooked(
    bundle: Any, precision: str, threads: int, tensors: Mapping[str, str]
) -> tuple[HookedTorch, tuple[str, ...]]:
    """``bundle``'s module with a forward hook on each module path of ``tensors`` ({module path:
    tensor}) it has, and the tensors hooked. The exported module may sit inside the spec's (an
    adapter): a path matches the one module whose path ends with it."""
    rt = open_torch(bundle, precision, threads)
    named = dict(rt.module.named_modules())
    modules = {t: m for path, t in tensors.items() if (m := _module(named, path)) is not None}
    return HookedTorch(rt, modules), tuple(modules)


def _module(named: Mapping[str, Any], path: str) -> Any:
    if path in named:
        return named[path]
    hits = [m for name, m in named.items() if name.endswith("." + path)]
    return hits[0] if len(hits) == 1 else None


# No engine: torch runs the module in this process (the reference and eager baseline), so no
# target lists it.
register_backend(
    Backend(
        name="torch",
        title="PyTorch",
        help="the PyTorch module, eager: the reference",
        precisions=("fp32",),
        lacks="the PyTorch module runs in fp32",
        open=open_torch,
        requires=Requirement("torch", "pip install 'edgekit[export]'", extra="export"),
        reference_rank=3,
        open_module=lambda module, inputs, outputs: TorchRuntime(module, inputs, outputs),
        debug=DebugHooks(
            capture="forward hooks on the modules, each mapped to the tensor its module's last ONNX node produces",
            open_hooked=open_hooked,
        ),
    )
)
