"""`edgekit demo`'s profile stage: the masked model against the AR baseline, with the HTML report."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle
from edgekit.probes.latency import MeasureConfig
from edgekit.profile.config import ProfileConfig, ProgressFn, has_artifact
from edgekit.profile.engines import available_engines, fastest_engine
from edgekit.profile.html import write_report
from edgekit.profile.stage import profile_bundle
from edgekit.profile.table import summary_rows

# ---- the demo stage -----------------------------------------------------------------------------
# Small: fp32 (+ int8) masked and AR decodes, and one extra sweep length (two exports) so the
# crossover is measured, not only estimated, and the frontier's K values timed under the same
# rule. Two warm-up decodes (ORT allocates and picks kernels
# in the first), then at least 10 measured ones over at least 0.5 s: with 5 and no warm-up the
# first decode's allocation made every CV warn.
DEMO_MEASURE = MeasureConfig(warmup_iters=2, warmup_seconds=0.0, iters=10, min_seconds=0.5)


DEMO_SWEEP = MeasureConfig(warmup_iters=1, warmup_seconds=0.0, iters=5, min_seconds=0.2)


# --full: a short length, L = 256 and 512 (architecture-only models at the trained widths), where
# the NAR decode's K parallel steps pay against AR's sequential ones; fp32 and int8 side by side.
DEMO_SWEEP_LENGTHS = (32, 256, 512)
# K = 5 and 6 between 4 and 8: the smallest K within 10 % of AR's quality sets the K the sweep
# runs at, and the 20,000-step masked demo gets there at K = 5 (event accuracy 0.871 against
# AR's 0.938 on 64 held-out conditions; K = 4: 0.815).
DEMO_FRONTIER_STEPS = (1, 2, 4, 5, 6, 8, 16)


def demo_profile(
    bundles: Mapping[str, Any],
    out_dir: Path | str,
    progress: ProgressFn | None = None,
    n: int = 32,
    frontier_steps: tuple[int, ...] = DEMO_FRONTIER_STEPS,
    sweep_lengths: tuple[int, ...] = DEMO_SWEEP_LENGTHS,
) -> dict[str, Any]:
    """The demo's profile stage: the masked bundle on the fastest engine here (``fastest_engine``:
    OpenVINO or ONNX Runtime), fp32 and int8 when quantized, against the AR baseline, with a
    short length sweep (``sweep_lengths``; () = the crossover from the bundle length alone) and
    the quality-latency frontier at ``frontier_steps`` on ``n`` held-out conditions; writes
    ``out_dir/report/profile.html`` and ``profile.json``. ``bundles``: {kind: Bundle or bundle
    path} with ``masked`` and ``ar``.
    Returns the stage summary the demo prints (and keeps in its JSON)."""

    masked = bundles["masked"]
    ar = bundles["ar"]
    root = lambda b: b.root if isinstance(b, Bundle) else Path(b)  # noqa: E731
    loaded = Bundle.load(root(masked))
    if progress:
        progress(f"pick the fastest engine here ({', '.join(available_engines())})", 0, 0)
    engine = fastest_engine(loaded, "int8" if has_artifact(loaded, "int8") else "fp32")
    cfg = ProfileConfig(
        runtimes=(engine["runtime"],),
        measure=DEMO_MEASURE,
        power="auto",
        idle_seconds=0.5,
        compare_ar=True,
        ar_bundle=root(ar),
        sweep_lengths=tuple(sweep_lengths),
        sweep_measure=DEMO_SWEEP,
        # Both precisions when the bundle has its INT8 model: a crossover each, one run.
        sweep_precision="fp32,int8" if has_artifact(loaded, "int8") else "fp32",
        sweep_cache=None,  # a temp dir, removed after: no hidden ONNX files next to the report
        frontier_steps=tuple(frontier_steps),
        frontier_n=n,
    )
    doc = profile_bundle(root(masked), cfg, progress)
    paths = write_report(doc, Path(out_dir) / "report")
    cross = (doc["compare_ar"] or {}).get("crossover") or {}
    return {
        "html": str(paths["html"]),
        "rows": doc["rows"],
        "json": str(paths["json"]),
        "engine": engine,
        "table": summary_rows(doc),
        "speedups": (doc["compare_ar"] or {}).get("speedups", []),
        "crossover": {k: cross.get(k) for k in ("seed_formula", "measured", "model")},
        "frontier": (doc["compare_ar"] or {}).get("frontier"),
        "power": doc["power"],
        "warnings": doc["warnings"] + ([engine["warning"]] if engine.get("warning") else []),
    }
