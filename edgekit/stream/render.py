"""`edgekit loadtest`'s console tables and its self-contained HTML report (tables only)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgekit.outpaths import write_text_into
from edgekit.output import Output

COLUMNS = (
    "policy",
    "streams",
    "chunks",
    "miss rate",
    "TTFC p50 ms",
    "  tokens wait p50 ms",
    "  1st chunk decode p50 ms",
    "chunk p50 ms",
    "p95 ms",
    "p99 ms",
    "jitter p99-p50 ms",
    "RTF",
    "SNR vs clean dB",
    "device util",
    "RSS growth B",
    "RSS growth after warm-up B",
    "switches",
    "rungs used",
)


def policy_rows(doc: Mapping[str, Any]) -> list[list[Any]]:
    rows = []
    for r in doc["policies"].values():
        lat = r["chunk_latency_ms"]
        rows.append(
            [
                r["policy"],
                doc["config"]["streams"],
                r["chunks"],
                f"{100 * r['deadline_miss_rate']:.1f}%",
                r["time_to_first_chunk_ms"]["median_ms"],
                r["first_chunk_ms"]["tokens_wait"]["median_ms"],
                r["first_chunk_ms"]["decode"]["median_ms"],
                lat["median_ms"],
                lat["p95_ms"],
                lat["p99_ms"],
                r["jitter_ms"]["p99_minus_p50"],
                r["real_time_factor"]["mean"],
                (r["quality"] or {}).get("snr_db_vs_clean", "n/a"),
                f"{100 * r['device_utilisation']:.0f}%",
                r.get("rss_growth_bytes", "n/a"),
                r.get("rss_growth_after_warmup_bytes", "n/a"),
                r["switches"],
                ", ".join(f"{k}:{v}" for k, v in r["rungs_used"].items()),
            ]
        )
    return rows


def _facts(doc: Mapping[str, Any]) -> dict[str, Any]:
    c, ch = doc["config"], doc["chunk"]
    rss = doc["rss"]
    return {
        "flow": (
            f"{doc['flow_bundle']} ({doc['runtime']['name']} "
            f"{doc['runtime']['precision']} on {doc['runtime']['device']})"
        ),
        "tokens": doc["tokens_bundle"],
        "chunk": f"{ch['frames']} frames + {ch['context']} context + {ch['lookahead']} lookahead "
        f"({ch['chunks_per_utterance']} chunks per {ch['utterance_frames']}-frame utterance)",
        "deadline": f"{c['deadline_ms']:g} ms per chunk, arrivals {c['arrivals']}, {c['duration_s']:g} s",
        "per-NFE ms (idle)": doc["per_nfe_ms_idle"],
        "ladder": " < ".join(r["label"] for r in doc["ladder"]),
        "RSS growth incl. warm-up (bytes)": rss.get("growth_bytes"),
    }


def print_loadtest(o: Output, doc: Mapping[str, Any]) -> None:
    o.pairs("loadtest", _facts(doc))
    rows = policy_rows(doc)  # one column per policy: a console is narrower than the metrics are many
    o.table(
        "per policy",
        ("metric", *[r[0] for r in rows]),
        [[c, *[r[i] for r in rows]] for i, c in enumerate(COLUMNS) if i],
    )


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return html.escape(f"{v:.3g}" if isinstance(v, float) else str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(doc: Mapping[str, Any]) -> str:
    facts = _table(("", ""), [[k, v] for k, v in _facts(doc).items()])
    switches = []
    for name, log in doc["switch_log"].items():
        rows = [
            [s["stream"], s["chunk"], s["from_rung"], s["to_rung"], s["reason"], s["slack_ms"], s["predicted_ms"]]
            for s in log
        ]
        if rows:
            switches.append(
                f"<h2>switches: {html.escape(name)}</h2>"
                + _table(("stream", "chunk", "from", "to", "reason", "slack ms", "predicted ms"), rows)
            )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>edgekit loadtest</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ddd;padding:3px 8px}"
        "table{border-collapse:collapse}</style></head><body><h1>edgekit loadtest</h1>"
        f"{facts}<h2>per policy</h2>{_table(COLUMNS, policy_rows(doc))}{''.join(switches)}"
        f"<h2>document</h2><pre>{html.escape(json.dumps(doc, indent=1, default=str))}</pre></body></html>"
    )


def write_html(doc: Mapping[str, Any], out_dir: Path | str) -> Path:
    """``out_dir/loadtest.html`` (written under a temporary name, then renamed: no partial file)."""
    return write_text_into(out_dir, "loadtest.html", render_html(doc))
