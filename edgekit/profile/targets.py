"""``profile --target``: each precision's engine as a target loads it (``edgekit build``'s file,
through ``builder.select_engine``, as ``edgekit run --target`` opens it), so the figures are the
shipped file's, not those of the bundle's ONNX opened with edgekit's in-memory graph changes."""

from __future__ import annotations

from edgekit.builder import select_engine
from edgekit.bundle import Bundle
from edgekit.profile.config import ProfileConfig, Variant, bundle_precisions, check_steps
from edgekit.targets import load_target


def target_variants(bundle: Bundle, cfg: ProfileConfig) -> list[Variant]:
    """The variants of ``cfg.target``: one engine per precision (``cfg.precisions``, else fp32 and,
    where the bundle has it, int8, each only if the target runs it) and step count. A missing or
    stale engine fails here, before anything is measured (``--rebuild`` builds it)."""
    assert cfg.target is not None
    target = load_target(cfg.target)
    precisions = cfg.precisions or (
        tuple(p for p in bundle_precisions(bundle) if p in target.precisions) or target.precisions[:1]
    )
    steps = check_steps(bundle, cfg)
    variants = []
    for precision in precisions:
        engine = select_engine(bundle, target, precision, cfg.rebuild)
        variants += [Variant(engine.runtime, precision, s, engine=engine) for s in steps]
    return variants
