"""The train-demo stage: each named demo model trained from its seed on the synthetic corpus and
saved as ``<name>.safetensors`` (the shipped weights folder only when asked for by name)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError, UsageError
from edgekit.models.demo import WEIGHTS_DIR, load_trained
from edgekit.models.train import DEFAULT_STEPS, MASKED_INIT, TrainConfig, save_weights, train_model

SCHEMA = "edgekit.train-demo/1"
DEMO_MODELS: tuple[str, ...] = ("masked-demo", "flow-demo", "ar-demo")
# A progress bar per model: (label, total steps) -> a context manager yielding advance().
ProgressBar = Callable[[str, int], AbstractContextManager[Callable[[], None]]]


@dataclass(frozen=True)
class TrainDemoConfig:
    models: tuple[str, ...] = DEMO_MODELS
    out: Path = Path("edgekit-weights")  # a new folder for the .safetensors files
    overwrite_shipped: bool = False  # write into the package's weights folder instead of ``out``
    steps: int | None = None  # optimizer steps per model; None = DEFAULT_STEPS

    def __post_init__(self) -> None:
        bad = [n for n in self.models if n not in DEMO_MODELS]
        if bad or not self.models:
            raise EdgekitError(
                f"--models {','.join(self.models)!r} names unknown models {bad}; valid: {', '.join(DEMO_MODELS)}"
            )

    def folder(self) -> Path:
        if self.overwrite_shipped:
            return WEIGHTS_DIR
        if Path(self.out).resolve() == WEIGHTS_DIR.resolve():
            raise UsageError(
                f"--out {self.out} is the package's shipped weights folder",
                hint="pass --overwrite-shipped to replace them, or another --out",
            )
        return Path(self.out)


def _no_bar(label: str, total: int) -> AbstractContextManager[Callable[[], None]]:
    return contextlib.nullcontext(lambda: None)


def train_demo(
    cfg: TrainDemoConfig, progress: ProgressBar | None = None, say: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Train each of ``cfg.models``; the ``edgekit.train-demo/1`` document: per model its final
    loss, seconds and the weights file written."""
    bar = progress or _no_bar
    tell = say or (lambda message: None)
    target = cfg.folder()
    results: dict[str, Any] = {}
    trained: dict[str, Any] = {}
    # The AR baseline first: the masked model starts from its weights (models/train.MASKED_INIT).
    for name in sorted(cfg.models, key=lambda n: n != MASKED_INIT):
        start = time.perf_counter()
        init = None
        if name == "masked-demo":
            init = (
                trained[MASKED_INIT].state_dict() if MASKED_INIT in trained else load_trained(MASKED_INIT).state_dict()
            )
            tell(
                f"{name}: starting from the {MASKED_INIT} weights "
                f"{'trained just now' if MASKED_INIT in trained else 'shipped with edgekit'}"
            )
        with bar(f"training {name}", cfg.steps or DEFAULT_STEPS[name]) as advance:
            module, loss = train_model(
                name, TrainConfig(steps=cfg.steps, init_state=init), progress=lambda step, value: advance()
            )
        trained[name] = module
        path = target / f"{name}.safetensors"
        save_weights(module, path)
        seconds = time.perf_counter() - start
        results[name] = {"final_loss": loss, "seconds": seconds, "path": str(path)}
        tell(f"{name}: final loss {loss:.4f} in {seconds:.0f} s -> {path}")
    return {"schema": SCHEMA, "steps": cfg.steps or DEFAULT_STEPS, "models": results}
