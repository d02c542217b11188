"""``profile --target``: each precision's engine as a target loads it (``edgekit build``'s file,
through ``builder.select_engine``, as ``edgekit run --target`` opens it), so the figures are the
shipped file's, not those of the bundle's ONNX opened with edgekit's in-memory graph changes."""

from __future__ import annotations

from edgekit.builder import select_engine
from edgekit.bundle import Bundle
from edgekit.errors import UsageError
from edgekit.profile.config import ProfileConfig, Variant
from edgekit.targets import load_target


def target_variants(bundle: Bundle, cfg: ProfileConfig) -> list[Variant]:
    """The variants of ``cfg.target``: one engine per precision (``cfg.precisions``, else fp32 and,
    where the bundle has it, int8, each only if the target runs it) and step count. A missing or
    stale engine fails here, before anything is measured (``--rebuild`` builds it)."""
    assert cfg.target is not None
    target = load_target(cfg.target)
    if cfg.precisions:
        precisions = cfg.precisions
    else:
        wanted = ("fp32", "int8") if bundle.has("int8") else ("fp32",)
        precisions = tuple(p for p in wanted if p in target.precisions) or target.precisions[:1]
    if cfg.steps and bundle.kind == "ar":
        raise UsageError("--steps does not apply to the ar model (one step per token)", hint="drop --steps")
    variants = []
    for precision in precisions:
        engine = select_engine(bundle, target, precision, cfg.rebuild)
        variants += [Variant(engine.runtime, precision, s, engine=engine) for s in cfg.steps or (None,)]
    return variants
