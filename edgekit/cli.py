"""The ``edgekit`` command line: each command parses options, calls one library function and
prints through one ``Output``. Heavy modules are imported inside commands, so ``--help`` works
with only the core installed."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from edgekit.errors import EXIT_ERROR, EdgekitError
from edgekit.output import Output

app = typer.Typer(
    name="edgekit",
    help="Export, quantize, build, run and check non-autoregressive generative models on edge devices.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)

# ---- shared options ------------------------------------------------------------------------------
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]
BundleArg = Annotated[Path, typer.Argument(help="Bundle directory (made by `edgekit export` or `edgekit demo`).", show_default=False)]
BatchOpt = Annotated[Optional[int], typer.Option("--batch", min=1, help="Static batch size baked into the graph.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of all decode noise (same seed, same output on every runtime).")]


def _debug() -> bool:
    return os.environ.get("EDGEKIT_DEBUG", "") not in ("", "0")


def command(name: str | None = None, **kwargs) -> Callable:
    """Register a command whose user errors print one line and exit with their code."""

    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kw):
            interrupted = _watch_sigint()
            try:
                return fn(*args, **kw)
            except EdgekitError as exc:
                if interrupted():
                    # Ctrl-C inside a C extension's import surfaces as an ImportError (and so as
                    # MissingDependency): the user pressed Ctrl-C, say that.
                    Output().err.print("interrupted: nothing was recorded for the unfinished stage")
                    raise typer.Exit(130) from None
                if _debug():
                    raise
                from rich.markup import escape

                Output().err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
                raise typer.Exit(exc.exit_code) from None
            except KeyboardInterrupt:
                if _debug():
                    raise
                Output().err.print("interrupted: nothing was recorded for the unfinished stage")
                raise typer.Exit(130) from None

        return app.command(name, **kwargs)(wrapper)

    return register


def _watch_sigint() -> Callable[[], bool]:
    """Remember whether SIGINT arrived (keeping Python's KeyboardInterrupt behaviour)."""
    import signal
    import threading

    seen = [False]
    if threading.current_thread() is not threading.main_thread():
        return lambda: seen[0]

    def handler(signum, frame):
        seen[0] = True
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not settable here (embedded interpreter)
        pass
    return lambda: seen[0]


def _configure_logging() -> None:
    import logging

    logging.basicConfig(level=logging.DEBUG if _debug() else logging.WARNING, format="%(levelname)s: %(message)s")


# ---- commands --------------------------------------------------------------------------------------
@command(
    epilog="Examples:\n\n  edgekit export masked-demo -o bundles/masked\n\n  edgekit export examples/custom_model.py:make_model -o bundles/mine --batch 2"
)
def export(
    model: Annotated[str, typer.Argument(help="Built-in name (masked-demo, flow-demo, ar-demo) or module:factory / file.py:factory.", show_default=False)],
    out: Annotated[Path, typer.Option("-o", "--out", help="Bundle directory to write.", show_default=False)],
    batch: BatchOpt = None,
    opset: Annotated[int, typer.Option(help="ONNX opset (17 or newer).")] = 18,
    atol: Annotated[float, typer.Option(help="Absolute tolerance of the ONNX-vs-torch check.")] = 1e-4,
    rtol: Annotated[float, typer.Option(help="Tolerance relative to each output's largest value.")] = 1e-3,
    json_out: JsonOpt = False,
) -> None:
    """Export a PyTorch model to a static-shape ONNX bundle and verify it against PyTorch."""
    _configure_logging()
    from edgekit.export import ExportConfig, VerifyConfig
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    o = Output(json_out)
    spec = load_spec(model, batch)
    o.info(f"exporting {spec.name} ({spec.kind}) to {out} …")
    cfg = ExportConfig(opset=opset, verify=VerifyConfig(atol=atol, rtol=rtol))
    bundle = export_bundle(spec, out, cfg, source=model)
    _print_verification(o, bundle)
    o.document(bundle.manifest)


def _print_verification(o: Output, bundle) -> None:
    ver = bundle.manifest["verification"]["fp32"]
    rows = [(n, e["max_abs"], e["max_rel"], e["tolerance"], "pass" if e["passed"] else "FAIL") for n, e in ver["outputs"].items()]
    o.table(f"{bundle.name}: ONNX vs torch on {ver['samples']} inputs", ["output", "max abs", "max rel", "tolerance", ""], rows)
    art = bundle.artifact("fp32")
    o.line(f"wrote {bundle.root / art.path} ({art.bytes / 1e6:.1f} MB), manifest {bundle.root / 'edgekit.json'}")


@command(epilog="Example:\n\n  edgekit inspect bundles/masked --json")
def inspect(bundle: BundleArg, json_out: JsonOpt = False) -> None:
    """Show a bundle's manifest: model, IO, artifacts, verification, engines."""
    from edgekit.bundle import Bundle

    o = Output(json_out)
    b = Bundle.load(bundle)
    m = b.manifest
    o.document(m)
    o.pairs(f"bundle {b.root}", {"model": b.name, "kind": b.kind, "source": m["model"].get("source"), "schema": m["schema"], **{f"meta.{k}": v for k, v in b.meta.items() if k != "conditioning"}})
    o.table("inputs / outputs", ["tensor", "role", "dtype", "shape"], [(n, "input", s.dtype, list(s.shape)) for n, s in b.inputs.items()] + [(n, "output", s.dtype, list(s.shape)) for n, s in b.outputs.items()])
    o.table("artifacts", ["name", "path", "MB", "sha256", "made by"], [(n, a["path"], a["bytes"] / 1e6, a["sha256"][:12], a["made_by"]) for n, a in m["artifacts"].items()])
    for name, ver in m.get("verification", {}).items():
        status = "passed" if ver.get("passed") else "FAILED"
        o.line(f"verification of {name}: {status} ({ver.get('reference')} vs {ver.get('candidate')}, {ver.get('samples')} inputs)")


@command("train-demo", epilog="Example:\n\n  edgekit train-demo --out edgekit/models/weights")
def train_demo(
    out: Annotated[Optional[Path], typer.Option("-o", "--out", help="Directory for the .safetensors files (default: the package's weights).")] = None,
    steps: Annotated[Optional[int], typer.Option(min=1, help="Optimizer steps per model (default: masked 3000, ar 1000, flow 1500).")] = None,
    models: Annotated[str, typer.Option(help="Comma-separated demo models to train.")] = "masked-demo,flow-demo,ar-demo",
    json_out: JsonOpt = False,
) -> None:
    """Retrain the built-in demo models on the synthetic corpus (a few minutes on 2 cores)."""
    _configure_logging()
    from edgekit.models.demo import WEIGHTS_DIR
    from edgekit.models.train import DEFAULT_STEPS, TrainConfig, save_weights, train_model

    o = Output(json_out)
    names = [n.strip() for n in models.split(",") if n.strip()]
    valid = ("masked-demo", "flow-demo", "ar-demo")
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise EdgekitError(f"--models {models!r} names unknown models {bad}; valid: {', '.join(valid)}")
    target = out or WEIGHTS_DIR
    results = {}
    for name in names:
        cfg = TrainConfig(steps=steps)
        with o.progress(f"training {name}", steps or DEFAULT_STEPS[name]) as advance:
            module, loss = train_model(name, cfg, progress=lambda s, l: advance())
        save_weights(module, target / f"{name}.safetensors")
        results[name] = {"final_loss": loss, "path": str(target / f"{name}.safetensors")}
        o.info(f"{name}: final loss {loss:.4f} -> {target / f'{name}.safetensors'}")
    o.document({"schema": "edgekit.train-demo/1", "steps": steps or DEFAULT_STEPS, "models": results})
    o.table("trained", ["model", "final loss", "weights"], [(n, r["final_loss"], r["path"]) for n, r in results.items()])


RuntimeOpt = Annotated[str, typer.Option("--runtime", help="ort | torch | trt.")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="fp32 | int8 (after `edgekit quantize`).")]


@command(
    epilog="Examples:\n\n  edgekit run bundles/masked --steps 8 --schedule cosine -o tokens.npz\n\n"
    "  edgekit run bundles/flow --solver rk4 --steps 2 --cond tokens=tokens.npy -o frames.npz\n\n"
    "  edgekit run bundles/masked --runtime torch --temperature 0 --json"
)
def run(
    bundle: BundleArg,
    out: Annotated[Optional[Path], typer.Option("-o", "--out", help="Write the outputs (tokens or frames, and the conditions) to this .npz.")] = None,
    runtime: RuntimeOpt = "ort",
    precision: PrecisionOpt = "fp32",
    steps: Annotated[Optional[int], typer.Option(help="masked: MaskGIT steps K; flow: solver steps.")] = None,
    schedule: Annotated[Optional[str], typer.Option(help="masked: cosine | linear | square | cubic | powK | log | exp.")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="masked/ar: logit temperature (0 = greedy); flow: noise scale.")] = None,
    choice_temperature: Annotated[Optional[float], typer.Option(help="masked: Gumbel temperature of the confidence (annealed to 0).")] = None,
    guidance: Annotated[Optional[float], typer.Option(help="CFG scale g: uncond + g·(cond − uncond); 1 = off.")] = None,
    solver: Annotated[Optional[str], typer.Option(help="flow: euler | midpoint | heun | rk4.")] = None,
    grid: Annotated[Optional[str], typer.Option(help="flow: uniform | cosine | sway.")] = None,
    sway: Annotated[Optional[float], typer.Option(help="flow: sway coefficient for --grid sway.")] = None,
    top_k: Annotated[Optional[int], typer.Option(help="ar: sample among the k most likely tokens (0 = all).")] = None,
    cond: Annotated[Optional[list[str]], typer.Option("--cond", help="NAME=VALUE (a number) or NAME=FILE.npy; repeatable.")] = None,
    seed: SeedOpt = 0,
    batch: Annotated[Optional[int], typer.Option("--batch", min=1, help="Decode rows (default: the graph's batch; half of it with guidance on a doubled-batch graph).")] = None,
    threads: Annotated[int, typer.Option(min=0, help="Runtime threads (0 = runtime default).")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Decode a bundle's model on a runtime and write the tokens or frames."""
    _configure_logging()
    from edgekit.pipeline import RunRequest, output_name, run_bundle, save_outputs

    o = Output(json_out)
    options = {
        "steps": steps, "schedule": schedule, "temperature": temperature, "choice_temperature": choice_temperature,
        "guidance": guidance, "solver": solver, "grid": grid, "sway": sway, "top_k": top_k,
    }
    raw_cond = {}
    for item in cond or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise EdgekitError(f"--cond {item!r} is not NAME=VALUE", hint="e.g. --cond class_id=3 or --cond tokens=tokens.npy")
        raw_cond[name] = value
    req = RunRequest(runtime=runtime, precision=precision, seed=seed, batch=batch, cond=raw_cond,
                     decode={k: v for k, v in options.items() if v is not None}, threads=threads)
    result = run_bundle(bundle, req)
    output, conds = result.pop("output"), result.pop("cond")
    if out is not None:
        save_outputs(out, output_name(result["kind"]), output, conds)
        result["out"] = str(out)
    for w in result["warnings"]:
        o.warn(w)
    o.document(result)
    summary = {
        "model": f"{result['model']} ({result['kind']})", "runtime": f"{runtime} on {result['device']}", "precision": precision,
        "batch": result["batch"], "steps": result["steps"], "NFE": result["nfe"], "runtime calls": result["runtime_calls"],
        "wall ms": result["wall_ms"],
    }
    summary |= {k: v for k, v in result["decode"].items() if k not in ("seed",)}
    for k, v in (result["quality"] or {}).items():
        summary[f"quality: {k}"] = v
    o.pairs(f"run {bundle}", summary)
    if out is not None:
        o.line(f"wrote {out}")


@command(epilog="Example:\n\n  edgekit demo --out edgekit-demo")
def demo(
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory for the demo bundles.")] = Path("edgekit-demo"),
    n: Annotated[int, typer.Option("--n", min=1, help="Evaluation sequences per model.")] = 32,
    seed: SeedOpt = 0,
    json_out: JsonOpt = False,
) -> None:
    """Run the whole pipeline on the built-in models and the default CPU target."""
    _configure_logging()
    from edgekit.pipeline import DemoConfig, run_demo

    o = Output(json_out)
    report = run_demo(DemoConfig(out=out, n=n, seed=seed), progress=lambda msg: o.info(f"· {msg}"))
    o.document(report)
    exp = report["stages"]["export"]
    o.table("export: torch → static ONNX, verified against torch", ["model", "bundle", "MB", "max abs err", "verified"],
            [(m, e["bundle"], e["bytes"] / 1e6, e["max_abs_error"], e["verified"]) for m, e in exp.items()])
    q = report["stages"]["decode"]["quality"]
    rows = [
        ("masked-demo (MaskGIT, 8 steps)", q["masked"]["validity"], q["masked"]["event_accuracy"], q["masked"]["nll_per_token"], "—"),
        ("ar-demo (KV cache, 64 steps)", q["ar"]["validity"], q["ar"]["event_accuracy"], q["ar"]["nll_per_token"], "—"),
        ("corpus (true samples)", q["corpus"]["validity"], q["corpus"]["event_accuracy"], q["corpus"]["nll_per_token"], "—"),
        ("flow-demo on masked tokens", "—", "—", "—", f"{q['flow']['snr_db']:.1f} dB"),
    ]
    o.table(f"decode quality vs the corpus ground truth (ort fp32, n={n}, seed={seed})",
            ["model", "validity", "event acc.", "NLL/token", "SNR vs clean"], rows)


def main() -> None:
    try:
        app()
    except EdgekitError as exc:  # raised outside a command (e.g. in a callback)
        if _debug():
            raise
        Output().err.print(f"error: {exc}", highlight=False, markup=False)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except SystemExit:
        raise
    except BaseException:  # an internal bug: keep the traceback, but the documented exit code
        import traceback

        traceback.print_exc()
        raise SystemExit(EXIT_ERROR) from None


if __name__ == "__main__":
    main()
