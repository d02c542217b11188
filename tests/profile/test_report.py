"""Report layer: the tables show the document's figures, the HTML is one well-formed,
self-contained file with its plots, and the JSON on disk is strict JSON."""

from __future__ import annotations

import base64
import json
import math
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from edgekit.errors import MissingDependency
from edgekit.output import jsonable
from edgekit.profile import render_html, summary_rows, variants_table, write_report
from edgekit.profile.table import crossover_lines

VOID = {"meta", "img", "br", "hr", "input", "link"}


class _Checker(HTMLParser):
    """Collects tags, checks that every non-void tag is closed in order, and records resources."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.images: list[str] = []
        self.external: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        for key in ("src", "href"):
            if attrs.get(key) and not attrs[key].startswith("data:"):
                self.external.append(attrs[key])
        if tag == "script":
            self.errors.append("a script tag")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def _check(page: str) -> _Checker:
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert page.startswith("<!DOCTYPE html>")
    assert not checker.errors and not checker.stack, (checker.errors, checker.stack)
    assert not checker.external, checker.external
    return checker


def test_variants_table_shows_the_measured_figures(profile_doc):
    columns, rows = variants_table(profile_doc)
    assert columns == ["metric", "ort fp32", "ort int8", "AR ort fp32"]
    by_label = {r[0]: r[1:] for r in rows}
    medians = [v["latency"]["median_ms"] for v in profile_doc["variants"]] + [
        profile_doc["compare_ar"]["variants"][0]["latency"]["median_ms"]
    ]
    assert by_label["median ms"] == medians
    assert by_label["tokens / s"][0] == profile_doc["variants"][0]["throughput"]["items_per_s"]
    assert by_label["mJ / decode"] == ["unavailable"] * 3
    assert by_label["p99 / p50"][0] == pytest.approx(
        profile_doc["variants"][0]["latency"]["p99_ms"] / profile_doc["variants"][0]["latency"]["median_ms"], rel=1e-12
    )
    assert by_label["host overhead share"][0].endswith("%")


def test_summary_has_every_table_and_the_power_reason(profile_doc):
    s = summary_rows(profile_doc)
    assert set(s) >= {"variants", "ratios", "ar", "sweep", "crossover", "power"}
    assert s["ratios"]["columns"] == ["ratio", "int8/fp32 (ort)"]
    ratio = profile_doc["ratios"][0]
    assert dict((r[0], r[1]) for r in s["ratios"]["rows"])["speedup"] == ratio["speedup"]
    # The AR int8 variant cannot run (no int8 artifact): a line saying why, not a table cell.
    assert len(s["ar"]["rows"]) == 1
    assert s["not_measured"] == [f"AR ort int8: not measured: {profile_doc['compare_ar']['variants'][1]['reason']}"]
    assert s["not_measured"][0].startswith("AR ort int8: not measured: AR bundle")
    assert s["power"] == ["power: unavailable (off): power measurement turned off"]
    assert s["crossover"][0].startswith("crossover (ort fp32, K=")
    assert "N > 1 + c/tau = " in s["crossover"][1] and s["crossover"][1].startswith("estimates, not the answer: ")
    assert any("length sweep: not run" in line for line in s["crossover"])


def test_crossover_lines_quote_the_measured_and_fitted_lengths():
    doc = {
        "compare_ar": {
            "crossover": {
                "available": True,
                "runtime": "ort",
                "precision": "fp32",
                "nar_steps": 8,
                "seed_formula": {"c_ms": 2.0, "tau_ms": 0.5, "n": 5.0},
                "k_steps_estimate": {"n": 32.0},
                "measured": {"n": 40.4, "bound": None},
                "model": {"n": 44.6},
                "sweep": {"available": True, "how": "architecture-only models", "notes": []},
            }
        }
    }
    lines = crossover_lines(doc)
    # one answer (issue #31: four different statements), the estimates labelled on one line
    assert lines[0] == "crossover (ort fp32, K=8): measured crossover N ~ 40 tokens"
    assert sum("crossover" in line and "N ~" in line for line in lines) == 1
    assert lines[1].startswith("estimates, not the answer: fitted per-step costs K*c(N) = N*tau(N) give N ~ 45")
    assert "N > 1 + c/tau = 5.0" in lines[1] and "N > K*c/tau = 32.0 with K=8" in lines[1]
    assert "architecture-only" in lines[2]


def test_html_is_well_formed_self_contained_and_has_the_plots(profile_doc, tmp_path):
    pytest.importorskip("matplotlib")
    paths = write_report(profile_doc, tmp_path / "report")
    page = paths["html"].read_text(encoding="utf-8")
    checker = _check(page)
    # latency histogram + per-step bars (no sweep in this document, no power trace: the reason instead)
    assert len(checker.images) == 2
    for src in checker.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    text = " ".join(checker.text)
    assert "power measurement turned off" in text and "int8/fp32 (ort)" in text
    doc = json.loads(paths["json"].read_text())
    assert doc["schema"] == "edgekit.profile/1" and doc["variants"][0]["id"] == "ort fp32"


def test_html_with_a_power_sensor_plots_the_trace(power_doc):
    pytest.importorskip("matplotlib")
    checker = _check(render_html(power_doc))
    assert len(checker.images) == 3  # histogram, per-step, power over time
    assert "idle baseline 2000 mW" in " ".join(checker.text)


def test_an_above_idle_energy_refused_says_why_under_the_table(power_doc):
    (v,) = power_doc["variants"]
    reason = "the decode drew no more than the idle baseline (1990 mW average vs 2000 mW idle): no energy above idle"
    doc = dict(power_doc, variants=[dict(v, energy=dict(v["energy"], above_idle_mj=None, reason=reason))])
    s = summary_rows(doc)
    rows = {r[0]: r[1:] for r in s["variants"]["rows"]}
    assert rows["mJ / decode"] == [v["energy"]["gross_mj"]]  # the gross figure stands
    assert rows["mJ / decode > idle"] == ["unavailable"]
    assert f"ort fp32: energy above idle unavailable: {reason}" in s["power"]
    assert not any("unavailable" in line for line in summary_rows(power_doc)["power"])


def test_html_escapes_what_it_shows(profile_doc):
    pytest.importorskip("matplotlib")
    doc = dict(profile_doc, model="<script>alert(1)</script>")
    page = render_html(doc)
    assert "<script>" not in page and "&lt;script&gt;" in page
    _check(page)


def test_html_renders_in_headless_chromium(profile_doc, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no chromium on this host (apt-get install chromium); the parser test above still checks the HTML")
    pytest.importorskip("matplotlib")
    path = write_report(profile_doc, tmp_path)["html"]
    r = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert "Variants side by side" in dom and "ort int8" in dom and dom.count("data:image/png;base64,") == 2


def test_missing_matplotlib_names_the_report_extra(profile_doc, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.delitem(sys.modules, "matplotlib.figure", raising=False)
    with pytest.raises(MissingDependency) as err:
        render_html(profile_doc)
    assert "pip install 'edgekit[report]'" in str(err.value)


def test_jsonable_makes_strict_json():
    import numpy as np

    doc = jsonable({"a": float("nan"), "b": float("inf"), "c": np.float32(1.5), "d": (1, 2), "e": np.arange(2)})
    assert doc == {"a": None, "b": "inf", "c": 1.5, "d": [1, 2], "e": [0, 1]}
    json.dumps(doc, allow_nan=False)
    assert not re.search(r"\bNaN\b", json.dumps(doc))
    assert math.isfinite(doc["c"])
