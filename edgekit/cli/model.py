"""Commands about one model: `export`, `inspect`, `train-demo`, `run`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from edgekit._lock import LOCK_WAIT
from edgekit.cli.app import (
    BatchOpt,
    BundleArg,
    CondDataOpt,
    JsonOpt,
    PrecisionOpt,
    RuntimeOpt,
    SeedOpt,
    command,
    configure_logging,
    parse_cond,
    WaitOpt,
)
from edgekit.errors import EdgekitError, UsageError
from edgekit.output import Output


# ---- commands --------------------------------------------------------------------------------------
@command(
    epilog="Examples:\n\n  edgekit export masked-demo -o bundles/masked\n\n  edgekit export examples/custom_model.py:make_model -o bundles/mine --batch 2\n\n  edgekit export flow-demo -o bundles/flow-chunk --chunk-frames 16 --context 16"
)
def export(
    model: Annotated[str, typer.Argument(help="Built-in name (masked-demo, flow-demo, ar-demo) or module:factory / file.py:factory.", show_default=False)],
    out: Annotated[Path, typer.Option("-o", "--out", help="Bundle directory to write.", show_default=False)],
    batch: BatchOpt = None,
    opset: Annotated[int, typer.Option(help="ONNX opset (17 or newer).")] = 18,
    atol: Annotated[float, typer.Option(help="Absolute tolerance of the ONNX-vs-torch check.")] = 1e-4,
    rtol: Annotated[float, typer.Option(help="Tolerance relative to each output's largest value.")] = 1e-3,
    graph: Annotated[Literal["host", "step", "unrolled"], typer.Option("--graph", help="host: per-step network (default); step: decode update in the graph; unrolled: the whole K-step decode in one call.")] = "host",
    decode_opt: Annotated[Optional[list[str]], typer.Option("--decode", help="KEY=VALUE decode option to bake into a --graph step|unrolled graph (default: the model's decode defaults); repeatable.")] = None,
    wait: WaitOpt = False,
    chunk_frames: Annotated[Optional[int], typer.Option("--chunk-frames", min=1, help="Flow models: export the chunk window graph for streaming (F frames emitted per chunk; see `edgekit loadtest`).")] = None,
    context: Annotated[int, typer.Option("--context", min=0, help="With --chunk-frames: already-decoded frames each window sees on its left.")] = 0,
    lookahead: Annotated[int, typer.Option("--lookahead", min=0, help="With --chunk-frames: frames past the chunk decoded with it and discarded.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Export a PyTorch model to a static-shape ONNX bundle and verify it against PyTorch."""
    configure_logging()
    from edgekit.bundle import Bundle
    from edgekit.export import (
        ExportConfig,
        VerifyConfig,
        baked_options,
        check_graph_kind,
        export_bundle,
        fused_bundle,
        window_spec,
    )
    from edgekit.export.render import print_verification
    from edgekit.models import load_spec

    o = Output(json_out)
    if graph not in ("host", "step", "unrolled"):
        raise UsageError(f"--graph {graph!r} is unknown; valid: host, step, unrolled")
    spec = load_spec(model, batch)
    if chunk_frames is not None:
        if graph != "host":
            raise UsageError("--chunk-frames exports the per-step window network; drop --graph")
        spec = window_spec(spec, chunk_frames, context, lookahead)
    elif context or lookahead:
        raise UsageError("--context and --lookahead need --chunk-frames", hint="e.g. --chunk-frames 16 --context 16")
    baked = {}
    if graph != "host":  # everything about the fused graph is checked before minutes of export
        check_graph_kind(spec.kind, graph)
        for item in decode_opt or []:
            key, sep, value = item.partition("=")
            if not sep:
                raise UsageError(f"--decode {item!r} is not KEY=VALUE", hint="e.g. --decode solver=rk4 --decode steps=4")
            try:
                baked[key] = float(value) if key in ("guidance", "temperature", "choice_temperature", "sway") else int(value) if key == "steps" else value
            except ValueError:
                raise UsageError(f"--decode {item!r}: {key} needs a number") from None
        baked_options(spec.kind, graph, spec.decode_defaults or {}, baked)  # an invalid value fails here
    o.info(f"exporting {spec.name} ({spec.kind}) to {out} …")
    cfg = ExportConfig(opset=opset, verify=VerifyConfig(atol=atol, rtol=rtol))
    LOCK_WAIT.set(wait)
    bundle = export_bundle(spec, out, cfg, source=model)
    print_verification(o, bundle)
    if graph != "host":
        o.info(f"adding the fused {graph} graph …")
        entry = fused_bundle(out, graph, baked, spec=spec, cfg=cfg)
        bundle = Bundle.load(out)
        o.pairs(f"fused {graph} graph (baked)", entry["baked"])
    o.document(bundle.manifest)


@command(epilog="Example:\n\n  edgekit inspect bundles/masked --json")
def inspect(bundle: BundleArg, json_out: JsonOpt = False) -> None:
    """Show a bundle's manifest: model, IO, artifacts, verification, engines."""
    from edgekit.bundle import Bundle
    from edgekit.inspect import print_bundle

    o = Output(json_out)
    b = Bundle.load(bundle)
    o.document(b.manifest)
    print_bundle(o, b)


@command("train-demo", epilog="Examples:\n\n  edgekit train-demo --models ar-demo --steps 50 --out retrained/\n\n"
         "  edgekit train-demo --overwrite-shipped   (replaces the weights `edgekit export masked-demo` loads)")
def train_demo(
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory for the .safetensors files (a new one; the shipped weights need --overwrite-shipped).")] = Path("edgekit-weights"),
    overwrite_shipped: Annotated[bool, typer.Option("--overwrite-shipped", help="Write into the package's own weights folder, replacing the shipped demo weights.")] = False,
    steps: Annotated[Optional[int], typer.Option(min=1, help="Optimizer steps per model (default: masked 6000, ar 1000, flow 1500).")] = None,
    models: Annotated[str, typer.Option(help="Comma-separated demo models to train.")] = "masked-demo,flow-demo,ar-demo",
    json_out: JsonOpt = False,
) -> None:
    """Retrain the built-in demo models on the synthetic corpus (all three: about 16 minutes on 2 idle cores)."""
    configure_logging()
    from edgekit.models.demo import WEIGHTS_DIR
    from edgekit.models.train import (
        DEFAULT_STEPS,
        TrainConfig,
        save_weights,
        train_model,
    )

    o = Output(json_out)
    names = [n.strip() for n in models.split(",") if n.strip()]
    valid = ("masked-demo", "flow-demo", "ar-demo")
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise EdgekitError(f"--models {models!r} names unknown models {bad}; valid: {', '.join(valid)}")
    if overwrite_shipped:
        target = WEIGHTS_DIR
    elif out.resolve() == WEIGHTS_DIR.resolve():
        raise UsageError(f"--out {out} is the package's shipped weights folder", hint="pass --overwrite-shipped to replace them, or another --out")
    else:
        target = out
    results = {}
    for name in names:
        cfg = TrainConfig(steps=steps)
        start = time.perf_counter()
        with o.progress(f"training {name}", steps or DEFAULT_STEPS[name]) as advance:
            module, loss = train_model(name, cfg, progress=lambda s, l: advance())
        save_weights(module, target / f"{name}.safetensors")
        seconds = time.perf_counter() - start
        results[name] = {"final_loss": loss, "seconds": seconds, "path": str(target / f"{name}.safetensors")}
        o.info(f"{name}: final loss {loss:.4f} in {seconds:.0f} s -> {target / f'{name}.safetensors'}")
    o.document({"schema": "edgekit.train-demo/1", "steps": steps or DEFAULT_STEPS, "models": results})
    o.table("trained", ["model", "final loss", "seconds", "weights"], [(n, r["final_loss"], r["seconds"], r["path"]) for n, r in results.items()])


@command(
    epilog="Examples:\n\n  edgekit run bundles/masked --steps 8 --schedule cosine -o tokens.npz\n\n"
    "  edgekit run bundles/flow --solver rk4 --steps 2 --cond tokens=tokens.npz -o frames.npz   (every row of tokens.npz)\n\n"
    "  edgekit run bundles/masked --runtime torch --temperature 0 --json\n\n"
    "  edgekit run bundles/masked --runtime openvino --precision int8 -o tokens.npz\n\n"
    "  edgekit run bundles/masked --target intel-cpu --precision int8 -o tokens.npz   # the blob `edgekit build` wrote"
)
def run(
    bundle: BundleArg,
    out: Annotated[Optional[Path], typer.Option("-o", "--out", help="Write the outputs (tokens or frames, the conditions as cond_NAME and, for flow, the starting noise x0) to this .npz.")] = None,
    runtime: RuntimeOpt = "ort",
    precision: PrecisionOpt = "fp32",
    steps: Annotated[Optional[int], typer.Option(help="masked: MaskGIT steps K; flow: solver steps.")] = None,
    schedule: Annotated[Optional[str], typer.Option(help="masked: cosine | linear | square | cubic | powK | log | exp.")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="masked/ar: logit temperature (0 = greedy); flow: noise scale.")] = None,
    choice_temperature: Annotated[Optional[float], typer.Option(help="masked: Gumbel temperature of the confidence (annealed to 0).")] = None,
    guidance: Annotated[Optional[float], typer.Option(help="CFG scale g: uncond + g·(cond − uncond); 1 = off.")] = None,
    solver: Annotated[Optional[Literal["euler", "midpoint", "heun", "rk4"]], typer.Option(help="flow: ODE solver.")] = None,
    grid: Annotated[Optional[Literal["uniform", "cosine", "sway"]], typer.Option(help="flow: time grid.")] = None,
    sway: Annotated[Optional[float], typer.Option(help="flow: sway coefficient for --grid sway.")] = None,
    top_k: Annotated[Optional[int], typer.Option(help="ar: sample among the k most likely tokens (0 = all).")] = None,
    length: Annotated[Optional[int], typer.Option(min=1, help="ar: tokens to generate (default: the KV cache's max length).")] = None,
    cond: Annotated[Optional[list[str]], typer.Option("--cond", help="NAME=VALUE (a number), NAME=FILE.npy, NAME=FILE.npz (its array NAME) or NAME=FILE.npz:KEY; files give the rows to decode (in as many graph batches as they need); repeatable.")] = None,
    cond_data: CondDataOpt = None,
    seed: SeedOpt = 0,
    batch: Annotated[Optional[int], typer.Option("--batch", min=1, help="Decode rows (default: the graph's batch; half of it with guidance on a doubled-batch graph).")] = None,
    threads: Annotated[int, typer.Option(min=0, help="Runtime threads (0 = runtime default).")] = 0,
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="Run the engine built for this target (overrides --runtime).")] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild a stale engine for --target instead of refusing it.")] = False,
    graph: Annotated[Literal["host", "step", "unrolled"], typer.Option("--graph", help="host: per-step network, host loop; step | unrolled: a fused graph added by `edgekit export --graph`.")] = "host",
    latency_budget_ms: Annotated[Optional[float], typer.Option("--latency-budget-ms", min=0.0, help="flow: pick solver and steps that fit this many ms per decode on this device (quality table measured once, stored in the bundle).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Decode a bundle's model on a runtime and write the tokens or frames."""
    configure_logging()
    from edgekit.evaluate import output_name
    from edgekit.run import (
        RunRequest,
        budget_doc,
        plan_for_request,
        print_plan,
        print_run,
        run_bundle,
        save_outputs,
    )

    o = Output(json_out)
    options = {
        "steps": steps, "schedule": schedule, "temperature": temperature, "choice_temperature": choice_temperature,
        "guidance": guidance, "solver": solver, "grid": grid, "sway": sway, "top_k": top_k, "length": length,
    }
    raw_cond = parse_cond(cond)
    plan = None
    if latency_budget_ms is not None:
        plan = plan_for_request(bundle, latency_budget_ms, raw_cond, batch, seed, progress=lambda msg: o.info(f"· {msg}"))
        print_plan(o, latency_budget_ms, plan)
        options["solver"], options["steps"] = plan.solver, plan.steps
    req = RunRequest(runtime=runtime, precision=precision, seed=seed, batch=batch, cond=raw_cond, cond_data=cond_data,
                     decode={k: v for k, v in options.items() if v is not None}, threads=threads, target=target, rebuild=rebuild, graph=graph)
    result = run_bundle(bundle, req)
    if plan is not None:
        result["budget"] = budget_doc(latency_budget_ms, plan)
    output, conds, x0 = result.pop("output"), result.pop("cond"), result.pop("x0", None)
    if out is not None:
        save_outputs(out, output_name(result["kind"]), output, conds, {} if x0 is None else {"x0": x0})
        result["out"] = str(out)
    o.document(result)
    print_run(o, result, f"run {bundle}")
