"""Reports of measuring commands: tables as rows (``table``), JSON documents on disk
(``document``) and the self-contained HTML report with plots (``html``, needs matplotlib: the
``report`` extra, imported only when a plot is drawn)."""

from edgekit.report.document import jsonable, write_json
from edgekit.report.html import render_html, write_html, write_report
from edgekit.report.table import (
    ar_table,
    crossover_lines,
    power_lines,
    ratios_table,
    summary_rows,
    sweep_table,
    variants_table,
)

__all__ = [
    "ar_table",
    "crossover_lines",
    "jsonable",
    "power_lines",
    "ratios_table",
    "render_html",
    "summary_rows",
    "sweep_table",
    "variants_table",
    "write_html",
    "write_json",
    "write_report",
]
