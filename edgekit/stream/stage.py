"""`edgekit loadtest`: N concurrent token -> frame streams on one device, per policy.

The token bundle (masked or AR) and the flow bundle's chunk window graph (``export
--chunk-frames``) share one device (``pipeline.Device``). For each policy the same streams run
with the same seeds; the document reports deadline misses, time to first chunk, chunk latency
percentiles and jitter, quality (SNR of each utterance's frames vs the demo's clean frames where
the model has them), device utilisation, RSS, and every policy switch. The run is bounded:
streams start new utterances only for ``duration_s`` and each utterance has a fixed chunk count.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.chunked import ChunkSpec
from edgekit.decode.dispatch import decode, decode_config
from edgekit.decode.flow import FlowDecodeConfig
from edgekit.errors import UsageError, one_of
from edgekit.evaluate import conditions, score
from edgekit.limits import check_options
from edgekit.probes.latency import summarize
from edgekit.probes.memory import RssTracker
from edgekit.run import measure_flow_quality, per_nfe_latency_ms
from edgekit.runtimes import open_runtime
from edgekit.runtimes.registry import backend, check_precision
from edgekit.stream.device import Device, DeviceRuntime
from edgekit.stream.pipeline import StreamContext, TokenSource, run_streams, run_utterance
from edgekit.stream.policy import POLICIES, AdaptivePolicy, CostModel, FixedPolicy, ladder, rung

ARRIVALS = ("all", "staggered", "poisson")


@dataclass(frozen=True)
class LoadConfig:
    streams: int = 1  # N concurrent streams
    deadline_ms: float = 50.0  # D: each chunk is due D ms after the previous one (playback clock)
    policies: tuple[str, ...] = ("fixed", "adaptive")  # run one after the other, same seeds
    solver: str = "rk4"  # the fixed policy's solver, and the adaptive policy's top rung cap (its NFE)
    steps: int = 4
    duration_s: float = 5.0  # streams start utterances for this long (the last one finishes)
    arrivals: str = "all"  # all at t=0 | staggered evenly over one utterance | poisson (seeded)
    runtime: str = "ort"
    precision: str = "fp32"
    threads: int = 0  # runtime intra-op threads; 0 = the runtime's default
    seed: int = 0
    cond: tuple[tuple[str, str], ...] = ()  # --cond NAME=VALUE of the token stage (default: the demo's held-out set)

    def __post_init__(self) -> None:
        # limits.OPTION_BOUNDS (inf and nan too: inf overflowed the schedule's arithmetic).
        check_options(
            {
                "--streams": self.streams,
                "--deadline-ms": self.deadline_ms,
                "--duration-s": self.duration_s,
                "--steps": self.steps,
                "--threads": self.threads,
                "--seed": self.seed,
            }
        )
        one_of("--arrivals", self.arrivals, ARRIVALS)
        bad = [p for p in self.policies if p not in POLICIES]
        if bad or not self.policies:
            raise UsageError(
                f"--policy {','.join(self.policies)!r} is invalid; valid: {', '.join(POLICIES)} (comma-separated)"
            )
        rung(self.solver, self.steps)
        check_precision(self.runtime, self.precision)  # the flow graph's; the token graph's follows from it


def arrival_offsets(n: int, arrivals: str, utterance_s: float, seed: int) -> list[float]:
    """Start times (s) of ``n`` streams: all at 0, evenly over one utterance, or Poisson."""
    if arrivals == "all":
        return [0.0] * n
    if arrivals == "staggered":
        return [i * utterance_s / n for i in range(n)]
    gaps = np.random.default_rng(seed).exponential(utterance_s / n, size=n)
    return [0.0] + list(np.cumsum(gaps)[:-1])


def tokens_precision(runtime: str) -> str:
    """The token stage's precision on ``runtime``: fp32 where it runs fp32, else its float
    precision (QNN's HTP has no fp32: the token graph runs in fp16 there)."""
    have = backend(runtime).precisions
    return "fp32" if "fp32" in have else next((p for p in have if p != "int8"), have[0])


def _token_source(bundle: Bundle, runtime, seed: int, raw_cond: dict[str, str]) -> TokenSource:
    if bundle.kind not in ("masked", "ar"):
        raise UsageError(f"TOKENS_BUNDLE must be a masked or ar bundle; {bundle.root} is {bundle.kind!r}")
    cfg = decode_config(bundle.kind, bundle.decode_defaults, {}, seed=seed)
    return TokenSource(bundle.kind, runtime, bundle.meta, cfg, conditions(bundle, raw_cond, 1, seed))


def _check_pair(tokens_b: Bundle, flow_b: Bundle, spec: ChunkSpec) -> None:
    """The token stage must make at least an utterance of ids the flow model embeds."""
    total = int(flow_b.meta.get("utterance_frames", flow_b.meta["frames"]))
    need = total // spec.frames_per_token
    have = int(tokens_b.meta.get("seq_len", tokens_b.meta.get("max_len", 0)))
    if have < need:
        raise UsageError(f"{tokens_b.root} makes {have} tokens per sequence; {flow_b.root} needs {need} per utterance")
    flow_vocab = flow_b.inputs[spec.tokens_input].high
    if flow_vocab is not None and int(tokens_b.meta["vocab_size"]) > flow_vocab:
        raise UsageError(
            f"{tokens_b.root} has {tokens_b.meta['vocab_size']} token ids; {flow_b.root} embeds < {int(flow_vocab)}"
        )


def _measure_quality(tokens_b: Bundle, flow_b: Bundle, spec: ChunkSpec, cfg: LoadConfig) -> dict[str, Any]:
    """The flow bundle's quality-per-NFE table (run.budget), on windows of generated tokens when
    the model has no demo evaluation set."""
    if flow_b.ground_truth:
        return measure_flow_quality(flow_b.root)
    batch = flow_b.inputs["x"].shape[0]
    # ORT fp32 whatever --runtime is: these tokens only feed the table of the flow model's
    # quality per NFE (a property of the model and solver, not of the backend).
    with open_runtime(tokens_b, "ort", "fp32", threads=cfg.threads) as rt:
        out = decode(
            tokens_b.kind,
            rt,
            tokens_b.meta,
            conditions(tokens_b, dict(cfg.cond), rt.inputs[next(iter(rt.inputs))].shape[0], cfg.seed),
            decode_config(tokens_b.kind, tokens_b.decode_defaults, {}, seed=cfg.seed),
        ).output
    window_tokens = spec.window // spec.frames_per_token
    rows = np.resize(out[:, :window_tokens], (batch, window_tokens)).astype(np.int64)
    return measure_flow_quality(flow_b.root, cond={spec.tokens_input: rows})


def _summary(ctx: StreamContext, device: Device, wall_s: float) -> dict[str, Any]:
    chunks, utts = ctx.chunks, ctx.utterances
    lat = summarize([c.done_ns - c.ready_ns for c in chunks])
    due = [c for c in chunks if c.due_ns is not None]
    ttfc = summarize([u.first_chunk_ns - u.request_ns for u in utts])
    firsts = [c for c in chunks if c.due_ns is None]
    requests = {(u.stream, u.utterance): u.request_ns for u in utts}
    rtf = [(u.done_ns - u.request_ns) / 1e6 / (u.chunks * ctx.deadline_ms) for u in utts]
    gaps = [
        b.done_ns - a.done_ns for a, b in zip(chunks, chunks[1:]) if a.stream == b.stream and a.utterance == b.utterance
    ]
    snrs = [u.quality for u in utts if u.quality is not None]
    used: dict[str, int] = {}
    for c in chunks:
        used[f"{c.solver}x{c.steps}"] = used.get(f"{c.solver}x{c.steps}", 0) + 1
    return {
        "utterances": len(utts),
        "chunks": len(chunks),
        "deadline_miss_rate": (sum(c.missed for c in due) / len(due)) if due else 0.0,
        "deadline_misses": sum(c.missed for c in due),
        "time_to_first_chunk_ms": ttfc.to_json(),
        # where the first chunk's time goes: waiting for its window's tokens, then decoding it
        "first_chunk_ms": {
            "tokens_wait": summarize([c.ready_ns - requests[c.stream, c.utterance] for c in firsts]).to_json(),
            "decode": summarize([c.done_ns - c.ready_ns for c in firsts]).to_json(),
        },
        "chunk_latency_ms": lat.to_json(),
        "jitter_ms": {
            "p99_minus_p50": lat.p99_ms - lat.median_ms,
            "inter_chunk_std": float(np.std(gaps) / 1e6) if gaps else 0.0,
        },
        "real_time_factor": {"mean": float(np.mean(rtf)), "max": float(np.max(rtf))},
        "quality": {"snr_db_vs_clean": float(np.mean([s["snr_db"] for s in snrs]))} if snrs else None,
        "device_utilisation": device.busy_ns / 1e9 / wall_s if wall_s > 0 else 0.0,
        "device_calls": device.calls,
        "rungs_used": dict(sorted(used.items())),
        # per chunk index (0 = first): where latency and misses concentrate in an utterance
        "by_chunk": {
            str(k): {
                "latency_p50_ms": float(np.median([(c.done_ns - c.ready_ns) / 1e6 for c in chunks if c.chunk == k])),
                "misses": sum(c.missed for c in chunks if c.chunk == k),
            }
            for k in sorted({c.chunk for c in chunks})
        },
        "wall_s": wall_s,
    }


def loadtest(tokens_path: Path | str, flow_path: Path | str, cfg: LoadConfig = LoadConfig()) -> dict[str, Any]:
    """Run the load test; returns the ``edgekit.loadtest/1`` document."""
    tokens_b, flow_b = Bundle.load(tokens_path), Bundle.load(flow_path)
    if flow_b.kind != "flow":
        raise UsageError(f"FLOW_BUNDLE must be a flow bundle; {flow_b.root} is {flow_b.kind!r}")
    spec = ChunkSpec.from_meta(flow_b.meta)
    _check_pair(tokens_b, flow_b, spec)
    quality = flow_b.flow_quality or _measure_quality(tokens_b, flow_b, spec, cfg)
    top = rung(cfg.solver, cfg.steps)
    # The adaptive policy starts where the fixed one is (its top rung) and slides down the
    # measured quality-per-NFE front below it.
    snr_top = next(
        (float(r["snr_db"]) for r in quality["table"] if (r["solver"], int(r["steps"])) == (top.solver, top.steps)),
        None,
    )
    rungs = [r for r in ladder(quality["table"], max_nfe=top.nfe) if r.nfe < top.nfe] + [
        rung(top.solver, top.steps, snr_top)
    ]
    defaults = decode_config("flow", flow_b.decode_defaults, {}, seed=cfg.seed)  # the policy picks solver and steps
    flow_cfg = FlowDecodeConfig(
        grid=defaults.grid, sway=float(defaults.sway), temperature=float(defaults.temperature), seed=cfg.seed
    )
    token_precision = tokens_precision(cfg.runtime)
    token_rt = open_runtime(
        tokens_b, cfg.runtime, token_precision, threads=cfg.threads
    )  # --precision is the flow graph's
    try:
        flow_rt = open_runtime(flow_b, cfg.runtime, cfg.precision, threads=cfg.threads)
    except BaseException:
        token_rt.close()
        raise
    tracker = RssTracker()
    tracker.start()
    try:
        prior = per_nfe_latency_ms(flow_rt)
        total = int(flow_b.meta.get("utterance_frames", flow_b.meta["frames"]))
        chunks_per_utt = -(-total // spec.frames)
        offsets = arrival_offsets(cfg.streams, cfg.arrivals, chunks_per_utt * cfg.deadline_ms / 1e3, cfg.seed)
        scorer = (
            (lambda toks, frames: score(flow_b, frames, {spec.tokens_input: toks})) if flow_b.ground_truth else None
        )  # noqa: E731
        results: dict[str, Any] = {}
        switches: dict[str, Any] = {}
        for name in cfg.policies:
            policy = FixedPolicy(top) if name == "fixed" else AdaptivePolicy(rungs, CostModel(prior))
            device = Device()
            ctx = StreamContext(
                _token_source(tokens_b, DeviceRuntime(token_rt, device), cfg.seed, dict(cfg.cond)),
                DeviceRuntime(flow_rt, device),
                device,
                flow_b.meta,
                flow_cfg,
                policy,
                scorer,
                cfg.deadline_ms,
                device.clock,
            )
            run_utterance(ctx, 0, -1, cfg.seed)  # warm-up: arenas and caches, not recorded
            ctx.chunks.clear(), ctx.utterances.clear(), policy.reset()
            device.busy_ns = device.calls = 0
            tracker.mark(f"{name}_start")
            wall = run_streams(ctx, offsets, cfg.duration_s, cfg.seed, on_warm=lambda n=name: tracker.mark(f"{n}_warm"))
            tracker.mark(f"{name}_end")
            results[name] = _summary(ctx, device, wall) | {
                "policy": name if name == "adaptive" else f"fixed {top.label}",
                "switches": len(policy.switches),
            }
            switches[name] = [s.__dict__ for s in policy.switches[:200]]
        rss = tracker.stop()
        marks = {label for label, _ in rss.points}
        for name in results:
            # start -> end includes each stream's buffers and token thread, made as it starts;
            # warm -> end (every stream past its first utterance) is the leak signal: a stream
            # reuses its buffers, so nothing it does per utterance should stay resident.
            start, end = rss.rss(f"{name}_start"), rss.rss(f"{name}_end")
            warm = rss.rss(f"{name}_warm") if f"{name}_warm" in marks else None
            results[name]["rss_growth_bytes"] = None if start is None or end is None else end - start
            results[name]["rss_growth_after_warmup_bytes"] = None if warm is None or end is None else end - warm
    finally:
        token_rt.close()
        flow_rt.close()
    return {
        "schema": "edgekit.loadtest/1",
        "tokens_bundle": str(tokens_b.root),
        "flow_bundle": str(flow_b.root),
        "config": cfg.__dict__ | {"policies": list(cfg.policies)},
        "chunk": {
            "frames": spec.frames,
            "context": spec.context,
            "lookahead": spec.lookahead,
            "window": spec.window,
            "utterance_frames": total,
            "chunks_per_utterance": chunks_per_utt,
        },
        "runtime": {
            "name": cfg.runtime,
            "precision": cfg.precision,
            "tokens_precision": token_precision,
            "device": flow_rt.device,
        },
        "per_nfe_ms_idle": prior,
        "ladder": [r.__dict__ | {"label": r.label} for r in rungs],
        "arrival_offsets_s": offsets,
        "policies": results,
        "switch_log": switches,
        "rss": rss.to_json(),
    }
