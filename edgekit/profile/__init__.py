"""`edgekit profile`: a bundle's decode measured on several variants side by side.

``config``: what is measured (variants); ``measure``: one variant under the probes; ``ratios``;
``compare_ar``: NAR vs AR and the crossover; ``frontier``: Pareto marking and the smallest K
within a tolerance of AR's quality (pure), ``frontier_points``: measuring those points;
``sweep``: architecture-only models at other lengths; ``stage``: the run and its
``edgekit.profile/1`` document; ``table``/``html``/``document``: the report as table rows,
self-contained HTML (matplotlib, lazily) and JSON; ``render``: the console; ``demo``: the demo's
profile stage; ``engines``: the fastest CPU engine on this host.
"""

from edgekit.profile.compare_ar import crossover, default_ar_bundle, seed_crossover
from edgekit.profile.config import (
    SCHEMA,
    SWEEPABLE,
    ProfileConfig,
    ProgressFn,
    Variant,
    plan_variants,
)
from edgekit.profile.demo import DEMO_FRONTIER_STEPS, DEMO_SWEEP_LENGTHS, demo_profile
from edgekit.profile.document import write_json
from edgekit.profile.engines import available_engines, fastest_engine
from edgekit.profile.html import render_html, write_html, write_report
from edgekit.profile.stage import profile_bundle
from edgekit.profile.sweep import length_sweep, length_variant_spec
from edgekit.profile.table import (
    ar_table,
    crossover_lines,
    frontier_lines,
    frontier_table,
    power_lines,
    ratios_table,
    summary_rows,
    sweep_table,
    variants_table,
)

__all__ = [
    "SCHEMA",
    "SWEEPABLE",
    "ProfileConfig",
    "ProgressFn",
    "Variant",
    "ar_table",
    "available_engines",
    "crossover",
    "DEMO_FRONTIER_STEPS",
    "DEMO_SWEEP_LENGTHS",
    "crossover_lines",
    "default_ar_bundle",
    "demo_profile",
    "fastest_engine",
    "frontier_lines",
    "frontier_table",
    "length_sweep",
    "length_variant_spec",
    "plan_variants",
    "power_lines",
    "profile_bundle",
    "ratios_table",
    "render_html",
    "seed_crossover",
    "summary_rows",
    "sweep_table",
    "variants_table",
    "write_html",
    "write_json",
    "write_report",
]
