"""`edgekit loadtest`: N token -> frame streams on one device, per (solver, steps) policy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command, parse_cond, parse_csv
from edgekit.outpaths import check_dir
from edgekit.output import Output


@command(
    epilog="Examples:\n\n  edgekit export flow-demo -o bundles/flow-chunk --chunk-frames 16 --context 16\n\n"
    "  edgekit loadtest bundles/masked bundles/flow-chunk --streams 4 --deadline-ms 400 --policy fixed,adaptive\n\n"
    "  edgekit loadtest bundles/ar bundles/flow-chunk --streams 2 --chunk-frames 16 --arrivals poisson --json\n\n"
    "  edgekit loadtest bundles/masked bundles/flow-chunk --runtime qnn --precision fp16 "
    "--policy fixed --steps 1 --duration-s 1"
)
def loadtest(
    tokens_bundle: Annotated[Path, typer.Argument(help="Token generator bundle (masked or ar).", show_default=False)],
    flow_bundle: Annotated[
        Path,
        typer.Argument(help="Flow bundle exported with --chunk-frames (the chunk window graph).", show_default=False),
    ],
    streams: Annotated[int, opt.bounded_option("--streams", "Concurrent streams N.")] = 1,
    chunk_frames: Annotated[
        int | None,
        typer.Option(
            "--chunk-frames",
            min=1,
            help="Frames per chunk; must match the bundle's window graph (default: the bundle's).",
        ),
    ] = None,
    deadline_ms: Annotated[
        float,
        opt.bounded_option("--deadline-ms", "Each chunk is due this long after the previous one."),
    ] = 50.0,
    policy: Annotated[
        str, typer.Option("--policy", help="fixed | adaptive, comma-separated to compare side by side.")
    ] = "fixed,adaptive",
    solver: Annotated[
        str, typer.Option("--solver", help="The fixed policy's solver and the adaptive policy's top rung.")
    ] = "rk4",
    steps: Annotated[int, opt.bounded_option("--steps", "Steps of --solver.")] = 4,
    duration_s: Annotated[
        float,
        opt.bounded_option("--duration-s", "Streams start utterances for this long; the last one finishes."),
    ] = 5.0,
    arrivals: Annotated[str, typer.Option("--arrivals", help="all | staggered | poisson.")] = "all",
    runtime: Annotated[
        str,
        opt.runtime_option(
            "Runtime of both graphs (the token graph runs in fp32, or a float precision where the runtime has no fp32)"
        ),
    ] = "ort",
    precision: Annotated[str, opt.precision_option("The flow graph's precision")] = "fp32",
    threads: Annotated[int, opt.threads_option("Runtime intra-op threads (0 = its default).")] = 0,
    cond: Annotated[
        list[str] | None,
        opt.repeatable_option(
            "--cond", "NAME=VALUE conditioning of the token stage (e.g. class_id=3; default: the demo's held-out set)"
        ),
    ] = None,
    seed: opt.Seed = 0,
    html_dir: Annotated[Path | None, typer.Option("--html", help="Write loadtest.html into this directory.")] = None,
    trust_code: opt.TrustCode = False,
    json_out: opt.Json = False,
) -> None:
    """Stream tokens into chunked flow decoding for N concurrent streams; report deadline misses, time
    to first chunk, chunk latency, jitter, quality and device use per policy."""
    from edgekit.bundle import Bundle
    from edgekit.errors import UsageError
    from edgekit.stream import LoadConfig
    from edgekit.stream import loadtest as run_loadtest
    from edgekit.stream.render import print_loadtest, write_html

    o = Output(json_out)
    if html_dir is not None:
        check_dir(html_dir, "--html")  # before the streams run, not after
    if chunk_frames is not None:
        chunk = Bundle.load(flow_bundle).meta.get("chunk") or {}
        if chunk.get("frames") != chunk_frames:
            raise UsageError(
                (
                    f"--chunk-frames {chunk_frames} does not match {flow_bundle}'s window graph "
                    f"({chunk.get('frames', 'none')} frames)"
                ),
                hint=(
                    f"export one: `edgekit export flow-demo -o {flow_bundle} --chunk-frames {chunk_frames} --context "
                    f"{chunk_frames}`"
                ),
            )
    cfg = LoadConfig(
        streams=streams,
        deadline_ms=deadline_ms,
        policies=parse_csv("--policy", policy),
        solver=solver,
        steps=steps,
        duration_s=duration_s,
        arrivals=arrivals,
        runtime=runtime,
        precision=precision,
        threads=threads,
        seed=seed,
        cond=tuple(sorted(parse_cond(cond).items())),
    )
    o.info(f"loadtest: {streams} stream(s), {deadline_ms:g} ms per chunk, policies {policy}, {duration_s:g} s each …")
    doc = run_loadtest(tokens_bundle, flow_bundle, cfg)
    if html_dir is not None:
        o.info(f"wrote {write_html(doc, html_dir)}")
    o.document(doc)
    print_loadtest(o, doc)
