"""The ``edgekit`` command line: each command parses options, calls one library function and
prints through one ``Output``. Heavy modules are imported inside commands, so ``--help`` works
with only the core installed."""

from __future__ import annotations

import functools
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from edgekit.errors import EXIT_ERROR, EdgekitError, UsageError
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


def _parse_cond(items: Optional[list[str]]) -> dict[str, str]:
    """--cond NAME=VALUE items -> {NAME: VALUE} (values are parsed by the pipeline)."""
    raw: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise EdgekitError(f"--cond {item!r} is not NAME=VALUE", hint="e.g. --cond class_id=3 or --cond tokens=tokens.npy")
        raw[name] = value
    return raw


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
    graph: Annotated[str, typer.Option("--graph", help="host (per-step network, default) | step (decode update in the graph) | unrolled (the whole K-step decode in one call).")] = "host",
    decode_opt: Annotated[Optional[list[str]], typer.Option("--decode", help="KEY=VALUE decode option to bake into a --graph step|unrolled graph (default: the model's decode defaults); repeatable.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Export a PyTorch model to a static-shape ONNX bundle and verify it against PyTorch."""
    _configure_logging()
    from edgekit.export import ExportConfig, VerifyConfig
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    o = Output(json_out)
    if graph not in ("host", "step", "unrolled"):
        raise UsageError(f"--graph {graph!r} is unknown; valid: host, step, unrolled")
    spec = load_spec(model, batch)
    baked = {}
    if graph != "host":  # everything about the fused graph is checked before minutes of export
        from edgekit.export.fused import baked_options, check_graph_kind, fused_bundle

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
    bundle = export_bundle(spec, out, cfg, source=model)
    _print_verification(o, bundle)
    if graph != "host":
        o.info(f"adding the fused {graph} graph …")
        entry = fused_bundle(out, graph, baked, spec=spec, cfg=cfg)
        from edgekit.bundle import Bundle

        bundle = Bundle.load(out)
        o.pairs(f"fused {graph} graph (baked)", entry["baked"])
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
    steps: Annotated[Optional[int], typer.Option(min=1, help="Optimizer steps per model (default: masked 6000, ar 1000, flow 1500).")] = None,
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
        start = time.perf_counter()
        with o.progress(f"training {name}", steps or DEFAULT_STEPS[name]) as advance:
            module, loss = train_model(name, cfg, progress=lambda s, l: advance())
        save_weights(module, target / f"{name}.safetensors")
        seconds = time.perf_counter() - start
        results[name] = {"final_loss": loss, "seconds": seconds, "path": str(target / f"{name}.safetensors")}
        o.info(f"{name}: final loss {loss:.4f} in {seconds:.0f} s -> {target / f'{name}.safetensors'}")
    o.document({"schema": "edgekit.train-demo/1", "steps": steps or DEFAULT_STEPS, "models": results})
    o.table("trained", ["model", "final loss", "seconds", "weights"], [(n, r["final_loss"], r["seconds"], r["path"]) for n, r in results.items()])


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
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="Run the engine built for this target (overrides --runtime).")] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild a stale engine for --target instead of refusing it.")] = False,
    graph: Annotated[str, typer.Option("--graph", help="host (per-step network, host loop) | step | unrolled (a fused graph added by `edgekit export --graph`).")] = "host",
    latency_budget_ms: Annotated[Optional[float], typer.Option("--latency-budget-ms", min=0.0, help="flow: pick solver and steps that fit this many ms per decode on this device (quality table measured once, stored in the bundle).")] = None,
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
    raw_cond = _parse_cond(cond)
    plan = None
    if latency_budget_ms is not None:
        plan = _budget_plan(o, bundle, latency_budget_ms, raw_cond, batch, seed)
        options["solver"], options["steps"] = plan.solver, plan.steps
    req = RunRequest(runtime=runtime, precision=precision, seed=seed, batch=batch, cond=raw_cond,
                     decode={k: v for k, v in options.items() if v is not None}, threads=threads, target=target, rebuild=rebuild, graph=graph)
    result = run_bundle(bundle, req)
    if plan is not None:
        result["budget"] = _budget_doc(latency_budget_ms, plan)
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


@command(
    epilog="Examples:\n\n  edgekit quantize bundles/masked\n\n"
    "  edgekit quantize bundles/flow --profile trt --method percentile --calib-samples 16 --decode guidance=2\n\n"
    "  edgekit quantize bundles/masked --exclude head --exclude blocks.3.mlp --budget token_agreement=0.98 --json"
)
def quantize(
    bundle: BundleArg,
    profile: Annotated[str, typer.Option(help="cpu: fastest on ONNX Runtime CPU (u8 activations, s8 per-channel weights, int32 bias) | trt: TensorRT QDQ rules (int8 symmetric, zero points 0, float bias).")] = "cpu",
    method: Annotated[str, typer.Option(help="Calibration: minmax | entropy | percentile.")] = "minmax",
    calib_samples: Annotated[int, typer.Option("--calib-samples", min=1, help="Calibration sequences decoded in FP32; every network call of their loops is recorded.")] = 8,
    eval_samples: Annotated[int, typer.Option("--eval-samples", min=1, help="Held-out sequences decoded in FP32 and INT8 to check the budget.")] = 16,
    exclude: Annotated[Optional[list[str]], typer.Option("--exclude", help="Keep in float: a node name, an op type (LayerNormalization) or a module path (blocks.0.mlp); repeatable.")] = None,
    budget: Annotated[Optional[list[str]], typer.Option("--budget", help="KEY=VALUE overriding the model kind's default: token_agreement, final_token_agreement, event_accuracy_drop (masked/ar), snr_db, gt_snr_drop_db (flow); repeatable.")] = None,
    decode: Annotated[Optional[list[str]], typer.Option("--decode", help="KEY=VALUE decode option for calibration and evaluation, as `edgekit run` takes them (guidance=2 calibrates the CFG rows too); repeatable.")] = None,
    fallback: Annotated[bool, typer.Option("--fallback/--no-fallback", help="Move the most sensitive nodes back to float until the budget holds.")] = True,
    seed: SeedOpt = 0,
    threads: Annotated[int, typer.Option(min=0, help="ONNX Runtime threads for calibration and evaluation (0 = ORT default).")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """INT8-quantize a bundle (QDQ), calibrated on its FP32 decode loop, within an accuracy budget."""
    _configure_logging()
    from edgekit.errors import CheckFailed
    from edgekit.quantize import QuantizeConfig, parse_budget, parse_decode, quantize_bundle

    o = Output(json_out)
    cfg = QuantizeConfig(
        profile=profile, method=method, calib_samples=calib_samples, eval_samples=eval_samples, eval_seed=seed,
        exclude=tuple(exclude or ()), budget=parse_budget(budget), decode=parse_decode(decode), fallback=fallback, threads=threads,
    )
    s = quantize_bundle(bundle, cfg, progress=lambda msg: o.info(f"· {msg}"))
    o.document(s)
    _print_quantize(o, s)
    if not s["passed"]:
        failed = ", ".join(f"{c['key']} {c['value']:.4g} (limit {c['op']} {c['limit']:g})" for c in s["budget"]["checks"] if c["passed"] is False)
        raise CheckFailed(
            f"INT8 model of {s['model']} misses the accuracy budget: {failed}; it was written and recorded as failed",
            hint=f"relax it (--budget KEY=VALUE), keep layers float (--exclude), or try --method percentile / --calib-samples {2 * calib_samples}",
        )


def _print_quantize(o: Output, s: dict) -> None:
    sizes, share, cal = s["sizes"], s["int8_flop_share"], s["calibration"]
    sel = s["selection"]
    o.pairs(f"quantize {s['bundle']}", {
        "model": f"{s['model']} ({s['kind']})",
        "profile / method": f"{s['profile']} / {s['method']}",
        "calibration": f"{cal['samples']} sequences in {cal['decodes']} FP32 decode(s): {cal['feeds']} recorded network calls, {cal['calls_per_decode']} per decode",
        "INT8 nodes": f"{len(sel['int8'])} ({', '.join(sorted({r['op'] for r in sel['int8']}))})",
        "INT8 share of FLOPs": f"{_pct(share['matmul'])} of MatMul/Gemm, {_pct(share['weighted'])} incl. Conv",
        "size": f"{sizes['fp32_bytes'] / 1e6:.2f} MB fp32 -> {sizes['int8_bytes'] / 1e6:.2f} MB int8 ({sizes['ratio']:.2f}x)",
        "kept float by op type": ", ".join(f"{k} x{v}" for k, v in sel["float_by_op_type"].items()) or "—",
        "budget": "met" if s["passed"] else "NOT met",
    })
    o.table("kept in float (node, why)", ["module / node", "op", "source", "reason"],
            [(r["label"], r["op"], r["source"], r["reason"]) for r in sel["float"]])
    checks = s["budget"]["checks"]
    reported = [(k, "—", v, "reported") for k, v in s["measured"].items() if not k.startswith("quality") and k not in {c["key"] for c in checks}]
    o.table("accuracy vs budget (held-out set, identical noise on FP32 and INT8)", ["metric", "limit", "INT8 vs FP32", ""],
            [(c["key"], f"{c['op']} {c['limit']:g}", c["value"], {True: "pass", False: "FAIL", None: "not measured"}[c["passed"]]) for c in checks] + reported)
    qf, qi = s["measured"].get("quality_fp32") or {}, s["measured"].get("quality_int8") or {}
    if qf:
        o.table("ground truth, FP32 vs INT8", ["metric", "FP32", "INT8"], [(k, qf[k], qi.get(k)) for k in qf])
    if s["fallback"]:
        o.table("budget fallback, most sensitive first (SQNR dB: output with only this node INT8; noise it adds locally)",
                ["#", "module / node", "output SQNR alone", "added locally"],
                [(i + 1, f["label"], f.get("isolated_output_sqnr_db"), f.get("added_sqnr_db")) for i, f in enumerate(s["fallback"])])
    where = {"masked": "mask share", "flow": "t", "ar": "position"}[s["kind"]]
    o.table(f"activation range drift across decode steps ({s['range_drift']['tensors']} INT8 input tensors; share = step max|x| / calibrated max|x|)",
            ["network calls", where, "mean share", "min share", "narrowest tensor"],
            [(_span(r["calls"], "d"), _span(r["position"], ".3g"), r["mean_share"], r["min_share"], r["min_tensor"])
             for r in s["range_drift"]["steps"]])
    o.line(f"wrote {s['bundle']}/{s['artifact']['int8']} (run it: edgekit run {s['bundle']} --precision int8)")


def _pct(value) -> str:
    return "—" if value is None else f"{value:.0%}"


def _span(pair: list, fmt: str) -> str:
    lo, hi = (format(v, fmt) for v in pair)
    return lo if lo == hi else f"{lo}–{hi}"


def _check_num(value, spec: str = ".4g") -> str:
    """A number for the table; also takes the strings a JSON round trip leaves ("inf", from
    `edgekit deploy --command check`) and None."""
    if value is None:
        return "—"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def _check_threshold_cell(row: dict) -> str:
    if row["threshold"] is None:
        return "—"
    return f"{'≥' if row['bound'] == 'min' else '≤'} {_check_num(row['threshold'])}"


def _check_baseline_cell(row: dict) -> str:
    if row["baseline"] is None:
        return "—"
    allowed = row["allowed_regression"]
    return _check_num(row["baseline"]) + (f" (±{_check_num(allowed, '.2g')})" if allowed is not None else "")


def _check_result_cell(row: dict) -> str:
    if not row["passed"]:
        return "FAIL"
    if row["value"] is None:
        return "n/a"  # undefined on both variants (e.g. NLL when no sequence is valid)
    return "pass" if row["gated"] else "info"


def _print_check(o: Output, doc: dict) -> None:
    mode = "greedy" if doc["greedy"] else "sampling as the bundle, same noise"
    rows = [
        (r["metric"], r["value"], _check_threshold_cell(r), _check_baseline_cell(r), _check_result_cell(r))
        for r in doc["rows"]
    ]
    o.table(
        f"{doc['model']} ({doc['kind']}): {doc['candidate']} vs {doc['reference']} — n={doc['n']}, seed={doc['seed']}, {mode}",
        ["metric", "value", "threshold", "baseline", "result"],
        rows,
    )
    q = doc["quality"]
    if q["reference"]:
        o.table(
            "quality vs ground truth" if q["ground_truth"] else f"quality ({q['metric_hook']})",
            ["metric", doc["reference"], doc["candidate"], "drop"],
            [(k, v, q["candidate"].get(k), q["drop"].get(k)) for k, v in q["reference"].items()],
        )
    for name, curve in doc["curves"].items():
        if 0 < len(curve) <= 16:  # per-step curves: where along the decode the candidate drifts
            o.line(f"{name}: " + "  ".join(_check_num(v, ".3g") for v in curve))
    gated = sum(1 for r in doc["rows"] if r["gated"])
    if doc["passed"]:
        o.line(f"PASS: {gated} gated metrics within their thresholds" + (f" and baseline {doc['baseline']}" if doc["baseline"] else ""))
    for key, what in (("saved_baseline", "baseline"), ("junit", "JUnit XML")):
        if doc.get(key):
            o.line(f"wrote {what} {doc[key]}")


@command(
    epilog="Exit codes: 0 pass · 4 a metric failed · 1 error.\n\n"
    "Examples:\n\n  edgekit check bundles/masked                     (ort:int8 vs ort:fp32, default thresholds)\n\n"
    "  edgekit check bundles/flow --reference torch --candidate ort:fp32 --n 32\n\n"
    "  edgekit check bundles/masked --thresholds ci/thresholds.toml --baseline ci/masked.json --junit report.xml\n\n"
    "  edgekit check bundles/masked --save-baseline ci/masked.json\n\n"
    "  edgekit check bundles/mine --metric mypkg.metrics:score --cond speaker=0.5"
)
def check(
    bundle: BundleArg,
    reference: Annotated[str, typer.Option("--reference", help="Known-good variant: runtime:precision (ort:fp32, torch:fp32, trt:fp16), a precision (on --runtime) or a runtime (fp32).")] = "fp32",
    candidate: Annotated[str, typer.Option("--candidate", help="Variant under test, same forms; int8 = the model `edgekit quantize` made.")] = "int8",
    runtime: Annotated[str, typer.Option("--runtime", help="Runtime of a variant given as a bare precision: ort | torch | trt.")] = "ort",
    n: Annotated[int, typer.Option("--n", min=1, help="Evaluation conditions (graph batch i decodes with seed + i).")] = 16,
    seed: SeedOpt = 0,
    greedy: Annotated[bool, typer.Option("--greedy", help="masked/ar: temperature 0 (argmax trajectories) instead of the bundle's sampling.")] = False,
    thresholds: Annotated[Optional[Path], typer.Option("--thresholds", help="TOML file overriding the per-kind default thresholds.")] = None,
    baseline: Annotated[Optional[Path], typer.Option("--baseline", help="Also fail a metric that regressed beyond its tolerance vs this baseline file.")] = None,
    save_baseline: Annotated[Optional[Path], typer.Option("--save-baseline", help="Write this run's metrics as a baseline file (JSON).")] = None,
    junit: Annotated[Optional[Path], typer.Option("--junit", help="Write JUnit XML for CI: one test case per metric.")] = None,
    metric: Annotated[Optional[str], typer.Option("--metric", help="Quality metric module:function(output, cond) -> {name: float}, higher = better. RUNS THAT CODE.")] = None,
    cond: Annotated[Optional[list[str]], typer.Option("--cond", help="NAME=VALUE (a number) or NAME=FILE.npy for models without a demo evaluation set; repeatable.")] = None,
    threads: Annotated[int, typer.Option(min=0, help="Runtime threads (0 = runtime default).")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Compare two variants of a bundle (default INT8 vs FP32) on whole decodes under identical noise; exit 4 when a metric fails."""
    _configure_logging()
    from edgekit.check import CheckConfig, check_bundle
    from edgekit.errors import CheckFailed

    o = Output(json_out)
    raw_cond = _parse_cond(cond)
    cfg = CheckConfig(
        reference=reference, candidate=candidate, runtime=runtime, n=n, seed=seed, greedy=greedy, cond=raw_cond,
        thresholds=thresholds, baseline=baseline, save_baseline=save_baseline, junit=junit, metric_hook=metric, threads=threads,
    )
    o.info(f"checking {bundle}: {candidate} vs {reference} on {n} conditions …")
    doc = check_bundle(bundle, cfg)
    for w in doc["warnings"]:
        o.warn(w)
    o.document(doc)
    _print_check(o, doc)
    if not doc["passed"]:
        failed = ", ".join(doc["failed"])
        raise CheckFailed(
            f"check failed: {failed} ({doc['candidate']} vs {doc['reference']} on {doc['model']})",
            hint="the table shows each value against its threshold; a deliberate change needs a new --save-baseline or --thresholds",
        )


def _print_demo_check(o: Output, chk: dict) -> None:
    """The demo's last table: one verdict per model."""
    rows = []
    for model, m in chk["models"].items():
        key = {"masked": ("token_agreement", "logits_kl"), "flow": ("snr_db", "velocity_snr_db"), "ar": ("token_agreement", "logits_kl")}
        doc = chk["documents"][model]
        shown = ", ".join(f"{k} {_check_num(m['metrics'][k])}" for k in key[doc["kind"]] if k in m["metrics"])
        compared = f"{m['candidate']} vs {m['reference']} (n={m['n']})"
        rows.append((model, compared, shown, "pass" if m["passed"] else "FAIL: " + ", ".join(m["failed"])))
    o.table(f"check: whole decodes under identical noise (seed={chk['seed']})", ["model", "compared", "key metrics", "verdict"], rows)
    o.line("check: PASS" if chk["passed"] else "check: FAIL (run `edgekit check BUNDLE` for the full table)")


def _budget_plan(o: Output, bundle: Path, budget_ms: float, raw_cond, batch: Optional[int], seed: int):
    """--latency-budget-ms of `run` and `profile`: the flow decode plan for this device, said on stderr."""
    from edgekit.bundle import Bundle
    from edgekit.decode.budget import plan_for_budget
    from edgekit.pipeline import conditions, graph_batch

    loaded = Bundle.load(bundle)
    plan = plan_for_budget(bundle, budget_ms, cond=conditions(loaded, raw_cond, batch or graph_batch(loaded), seed))
    o.info(f"budget {budget_ms:g} ms: {plan.solver} x {plan.steps} steps ({plan.nfe} NFE x {plan.per_nfe_ms:.3f} ms "
           f"= {plan.expected_ms:.2f} ms expected, {plan.expected_snr:.1f} dB vs the 128-NFE reference)")
    return plan


def _budget_doc(budget_ms: float, plan) -> dict[str, Any]:
    """The "budget" entry of the --json document of `run` / `profile`."""
    return {"budget_ms": budget_ms, "solver": plan.solver, "steps": plan.steps, "nfe": plan.nfe,
            "expected_ms": plan.expected_ms, "expected_snr_db": plan.expected_snr, "per_nfe_ms": plan.per_nfe_ms}


def _csv(option: str, value: Optional[str], cast=str) -> tuple:
    """'a,b' -> ('a', 'b'); a bad item is a one-line usage error naming the option."""
    if value is None:
        return ()
    items = [v.strip() for v in value.split(",") if v.strip()]
    try:
        return tuple(cast(v) for v in items)
    except ValueError:
        raise UsageError(f"{option} {value!r} is not a comma-separated list of {cast.__name__}s") from None


@contextmanager
def _profile_progress(o: Output):
    """progress(label, done, total) for the profiler: one bar per label on stderr in a terminal,
    one `· label` line per stage otherwise (logs stay readable)."""
    if o.quiet or not o.err.is_terminal:
        seen: set[str] = set()

        def line(label: str, done: int, total: int) -> None:
            if label not in seen:
                seen.add(label)
                o.info(f"· {label}")

        yield line
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=o.err, transient=True) as bar:
        tasks: dict[str, int] = {}

        def update(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total or None)
            bar.update(tasks[label], completed=done, total=total or None)

        yield update


def _print_profile(o: Output, doc: dict) -> None:
    """The side-by-side table, the ratios, NAR vs AR, power and warnings (shared with `demo`)."""
    from edgekit.report import summary_rows

    s = summary_rows(doc)
    o.table(f"profile {doc['model']} ({doc['kind']}), {doc['rows']} rows per decode", s["variants"]["columns"], s["variants"]["rows"])
    if s["ratios"]["rows"]:
        o.table("ratios measured in the same run (latency < 1: the first is faster)", s["ratios"]["columns"], s["ratios"]["rows"])
    if "ar" in s:
        o.table("NAR vs AR at the same length (speedup = AR ms / NAR ms)", s["ar"]["columns"], s["ar"]["rows"])
        if len(s["sweep"]["rows"]) > 1:
            o.table("decode time against length (crossover)", s["sweep"]["columns"], s["sweep"]["rows"])
    for line in s["crossover"] + s["power"]:
        o.line(line)
    for w in doc["warnings"]:
        o.warn(w)


@command(
    epilog="Examples:\n\n  edgekit profile edgekit-demo/masked\n\n"
    "  edgekit profile edgekit-demo/masked --runtime ort,torch --precision fp32,int8 --html report/\n\n"
    "  edgekit profile edgekit-demo/masked --compare-ar --sweep 16,32,128,256\n\n"
    "  edgekit profile bundles/flow --steps 2,4,8 --iters 50 --min-seconds 5 --power rapl --json"
)
def profile(
    bundle: BundleArg,
    runtime: Annotated[str, typer.Option("--runtime", help="Comma-separated runtimes to compare: ort, torch, trt.")] = "ort",
    precision: Annotated[Optional[str], typer.Option("--precision", help="Comma-separated: fp32, int8 (default: fp32, plus int8 when the bundle has it).")] = None,
    steps: Annotated[Optional[str], typer.Option("--steps", help="Decode steps, comma-separated for several variants (masked K, flow solver steps).")] = None,
    batch: Annotated[Optional[int], typer.Option("--batch", min=1, help="Decode rows (default: the graph's batch).")] = None,
    iters: Annotated[Optional[int], typer.Option("--iters", min=1, help="Measured decodes per variant, at least (default 20).")] = None,
    min_seconds: Annotated[Optional[float], typer.Option("--min-seconds", min=0, help="Measure each variant for at least this long (default 1 s).")] = None,
    warmup: Annotated[Optional[int], typer.Option("--warmup", min=0, help="Warm-up decodes per variant, at least (default 3; also >= 0.2 s).")] = None,
    power: Annotated[str, typer.Option("--power", help="off | auto | nvml | jetson | tegrastats | rapl | android | odpm | rpi.")] = "auto",
    compare_ar: Annotated[bool, typer.Option("--compare-ar", help="Also decode the AR baseline at the same length: speedup and crossover length.")] = False,
    ar_bundle: Annotated[Optional[Path], typer.Option("--ar-bundle", help="The AR baseline bundle (default: the sibling `ar` directory, as `edgekit demo` lays them out).")] = None,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="Extra lengths for the crossover sweep, e.g. 16,32,128 (needs torch); 'none' to skip.")] = None,
    latency_budget_ms: Annotated[Optional[float], typer.Option("--latency-budget-ms", min=0.0, help="flow: profile the solver and steps that fit this many ms per decode on this device (as `edgekit run --latency-budget-ms`).")] = None,
    sweep_precision: Annotated[str, typer.Option("--sweep-precision", help="fp32 | int8: precision of the architecture-only sweep models (int8: cpu-profile QDQ, no budget).")] = "fp32",
    cond: Annotated[Optional[list[str]], typer.Option("--cond", help="NAME=VALUE (a number) or NAME=FILE.npy; repeatable.")] = None,
    threads: Annotated[int, typer.Option(min=0, help="Runtime threads (0 = runtime default).")] = 0,
    seed: SeedOpt = 0,
    html: Annotated[Optional[Path], typer.Option("--html", help="Write a self-contained HTML report (and profile.json) into this directory.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure a bundle's decode on several runtimes/precisions side by side: latency, per-step and host time, throughput, energy, memory."""
    _configure_logging()
    from edgekit.probes.latency import MeasureConfig
    from edgekit.profiler import ProfileConfig, profile_bundle

    o = Output(json_out)
    base = MeasureConfig()
    measure_cfg = MeasureConfig(
        warmup_iters=base.warmup_iters if warmup is None else warmup,
        warmup_seconds=base.warmup_seconds if warmup is None else 0.0,  # an explicit count is the whole rule
        iters=iters or base.iters,
        min_seconds=base.min_seconds if min_seconds is None else min_seconds,
        max_iters=max(base.max_iters, iters or 0),
    )
    raw_cond = _parse_cond(cond)
    extra: dict[str, Any] = {"sweep_precision": sweep_precision}
    if sweep is not None:
        extra["sweep_lengths"] = () if sweep.strip().lower() in ("none", "off", "") else _csv("--sweep", sweep, int)
    plan = None
    if latency_budget_ms is not None:
        if steps is not None:
            raise UsageError("--latency-budget-ms chooses the steps itself; drop --steps (or drop the budget)")
        plan = _budget_plan(o, bundle, latency_budget_ms, raw_cond, batch, seed)
        steps, extra["decode"] = str(plan.steps), {"solver": plan.solver}
    cfg = ProfileConfig(
        runtimes=_csv("--runtime", runtime), precisions=_csv("--precision", precision), steps=_csv("--steps", steps, int),
        batch=batch, cond=raw_cond, measure=measure_cfg, power=power, compare_ar=compare_ar, ar_bundle=ar_bundle,
        seed=seed, threads=threads, **extra,
    )
    if html is not None:
        from edgekit._deps import require

        require("matplotlib")  # before minutes of measuring, not after
    with _profile_progress(o) as progress:
        doc = profile_bundle(bundle, cfg, progress=progress)
    if plan is not None:
        doc["budget"] = _budget_doc(latency_budget_ms, plan)
    if html is not None:
        from edgekit.report import write_report

        paths = write_report(doc, html)
        doc["report"] = {k: str(v) for k, v in paths.items()}
    o.document(doc)
    _print_profile(o, doc)
    if html is not None:
        o.line(f"wrote {doc['report']['html']} and {doc['report']['json']}")


TargetOpt = Annotated[str, typer.Option("--target", "-t", help="Target name (see `edgekit targets`) or a path to your own target .toml.")]


@command(epilog="Examples:\n\n  edgekit targets\n\n  edgekit targets --json")
def targets(json_out: JsonOpt = False) -> None:
    """List the deployment targets edgekit ships (runtimes, precisions, power probe)."""
    from edgekit.targets import list_targets

    o = Output(json_out)
    found = list_targets()
    o.document({"schema": "edgekit.targets/1", "targets": [t.to_json() for t in found]})
    o.table("targets (pass one with --target NAME, or --target your.toml)",
            ["target", "runtimes", "precisions", "power", "description"],
            [(t.name, " → ".join(t.runtimes), ",".join(t.precisions), t.power_probe, t.description) for t in found])


@command(epilog="Examples:\n\n  edgekit doctor\n\n  edgekit doctor --target jetson-orin-nano --json")
def doctor(
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="Check one target (name or .toml); default: every built-in target.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Say what this host can run for a target, and what is missing (with the install line)."""
    from edgekit.doctor import doctor as run_doctor

    o = Output(json_out)
    doc = run_doctor(target)
    o.document(doc)
    env = doc["environment"]
    o.pairs("this host", {**doc["host"], "onnxruntime": env["onnxruntime"],
                          "ORT providers": ", ".join(env["providers"]), "tensorrt": env["tensorrt"],
                          "gpu": env["gpu"] and f"{env['gpu']['name']} (sm {env['gpu']['compute_capability']})"})
    if target is None:
        o.table("targets", ["target", "runs with", "device here", "power probe", "missing"],
                [(t["target"], t["runs_with"], t["device"]["matches"], t["power"]["probe"] if t["power"]["available"] else "unavailable",
                  len(t["missing"])) for t in doc["targets"]])
        o.line("details and install lines: edgekit doctor --target NAME")
        return
    t = doc["targets"][0]
    o.table(f"target {t['target']}: runtimes in order", ["runtime", "usable here", "version", "providers / problems"],
            [(r["runtime"], r["available"], r["version"], ", ".join(r.get("providers") or r.get("problems") or [])) for r in t["runtimes"]])
    power = t["power"]
    o.pairs("device and power", {
        "this host is the device": t["device"]["matches"] or "; ".join(t["device"]["reasons"]),
        "power probe": power["probe"] if power["available"] else f"unavailable: {power['reason']}",
    })
    for m in t["missing"]:  # lines, not a table: install commands must survive copy and paste
        o.line(f"missing: {m['what']}" + (f" ({m['why']})" if m.get("why") else ""))
        if m.get("install"):
            o.line(f"    {m['install']}")
    o.line(f"{t['target']}: " + (f"ready (runs with {t['runs_with']})" if t["ready"] else
                                 "not ready here" + (f"; runs with {t['runs_with']} for testing" if t["runs_with"] else "")))


@command(epilog="Examples:\n\n  edgekit build bundles/masked --target cpu\n\n"
         "  edgekit build bundles/masked --target android-arm64   # writes the .ort model\n\n"
         "  edgekit build bundles/masked --target jetson-orin-nano --precision int8   # on the Jetson")
def build(
    bundle: BundleArg,
    target: TargetOpt = "cpu",
    precision: Annotated[str, typer.Option("--precision", help="fp32 | fp16 (TensorRT) | int8 (after `edgekit quantize`).")] = "fp32",
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild even when an engine exists (required for a stale one).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Build a bundle's engine for a target: optimized .onnx / .ort for ONNX Runtime, a TensorRT plan on the device."""
    _configure_logging()
    from edgekit.build import build_bundle

    o = Output(json_out)
    doc = build_bundle(bundle, target, precision, rebuild)
    o.document(doc)
    e = doc["engine"]
    for f in doc["lint"]:
        if f["severity"] == "warning":
            o.warn(f"{f['artifact']}: {f['message']}")
    o.pairs(f"{doc['key']}: {doc['status']}", {
        "MB": e["bytes"] / 1e6, "runtime": f"{e['runtime']} {e['runtime_version']}",
        "format": e["format"], "device": e["device"], "compute capability": e["compute_capability"], "L4T": e["l4t"],
        "from": f"{e['source']} (sha256 {e['source_onnx_sha256'][:12]}…)", "fixed shapes": e.get("fixed_shapes") or None,
    })
    o.line(f"engine: {Path(doc['bundle']) / e['path']}")
    if e.get("required_operators"):
        o.line(f"required operators (for a minimal onnxruntime build): {Path(doc['bundle']) / e['required_operators']['path']}")


@command(epilog="Examples:\n\n  edgekit lint bundles/masked --target jetson-orin-nano\n\n  edgekit lint bundles/masked --target android-arm64 --json")
def lint(bundle: BundleArg, target: TargetOpt = "cpu", json_out: JsonOpt = False) -> None:
    """Check that a bundle's graphs will deploy to a target (exit 4 on an error-level finding)."""
    from edgekit.lint import lint_report

    o = Output(json_out)
    doc = lint_report(bundle, target)
    o.document(doc)
    if doc["findings"]:
        o.table(f"lint {doc['bundle']} for {doc['target']}", ["severity", "rule", "model", "finding", "fix"],
                [(f["severity"], f["rule"], f["artifact"], f["message"], f["hint"]) for f in doc["findings"]])
    c = doc["counts"]
    o.line(f"{c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s): "
           + ("deploys" if doc["passed"] else f"will not deploy to {doc['target']} as it is"))
    if not doc["passed"]:
        raise typer.Exit(4)


@command(epilog="Examples:\n\n  edgekit pack bundles/masked -o masked.tar.gz\n\n  edgekit pack bundles/masked -o masked-rpi5.tar.gz --target rpi5")
def pack(
    bundle: BundleArg,
    out: Annotated[Path, typer.Option("-o", "--out", help="Tarball to write (.tar.gz).", show_default=False)],
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="Only what this target needs (default: every artifact and engine).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Pack a bundle into a tarball to copy to a device (unpack there with `edgekit unpack`)."""
    from edgekit.deploy import pack_bundle

    o = Output(json_out)
    doc = pack_bundle(bundle, out, target)
    o.document(doc)
    o.line(f"wrote {doc['out']} ({len(doc['files'])} files, {doc['bytes'] / 1e6:.1f} MB" + (f", for {doc['target']}" if doc["target"] else "") + ")")
    for item in doc["left_out"]:
        o.info(f"left out {item}")


@command(epilog="Example:\n\n  edgekit unpack masked.tar.gz -o bundles/")
def unpack(
    archive: Annotated[Path, typer.Argument(help="Tarball made by `edgekit pack`.", show_default=False)],
    out: Annotated[Path, typer.Option("-o", "--out", help="Folder to unpack into.")] = Path("."),
    json_out: JsonOpt = False,
) -> None:
    """Unpack a bundle tarball, refusing any member that would land outside the folder."""
    from edgekit.deploy import safe_extract

    o = Output(json_out)
    paths = safe_extract(archive, out)
    o.document({"schema": "edgekit.unpack/1", "archive": str(archive), "out": str(out), "files": [str(p) for p in paths]})
    o.line(f"unpacked {len(paths)} entries into {out}")


@command(epilog="Examples:\n\n  edgekit deploy bundles/masked --host pi@raspberrypi.local --target rpi5\n\n"
         "  edgekit deploy bundles/masked --host nvidia@orin.local --target jetson-orin-nano --command check --json\n\n"
         "  edgekit deploy bundles/masked --host me@192.0.2.10 --port 2222 --identity ~/.ssh/id_ed25519 --command run -- --steps 4")
def deploy(
    bundle: BundleArg,
    host: Annotated[str, typer.Option("--host", help="user@host of the device (ssh checks its host key as always).", show_default=False)],
    target: TargetOpt = "cpu",
    command_name: Annotated[str, typer.Option("--command", help="profile | run | check, run on the device with --json.")] = "profile",
    port: Annotated[Optional[int], typer.Option("--port", help="ssh port (default: ssh's).")] = None,
    identity: Annotated[Optional[Path], typer.Option("--identity", "-i", help="Private key file for ssh.")] = None,
    known_hosts: Annotated[Optional[Path], typer.Option("--known-hosts", help="known_hosts file to verify the device against (default: ssh's).")] = None,
    precision: Annotated[Optional[str], typer.Option("--precision", help="Precision to build/run there (default: the target's first).")] = None,
    remote_dir: Annotated[str, typer.Option("--remote-dir", help="Folder on the device for bundles and reports.")] = "~/edgekit-deploy",
    remote_edgekit: Annotated[Optional[str], typer.Option("--remote-edgekit", help="edgekit on the device (default: PATH, ~/.venvs/edgekit/bin).")] = None,
    transfer: Annotated[str, typer.Option("--transfer", help="auto (rsync when both ends have it) | rsync | scp.")] = "auto",
    out: Annotated[Path, typer.Option("-o", "--out", help="Where the device's JSON and report files come back to.")] = Path("edgekit-reports"),
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild a stale engine made here for the target.")] = False,
    args: Annotated[Optional[list[str]], typer.Argument(help="Extra options for the device's command (after --).", show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Copy a bundle to a device over SSH, run `edgekit profile|run|check` there and bring the report back."""
    _configure_logging()
    from edgekit.deploy import SshOptions, deploy as run_deploy

    o = Output(json_out)
    ssh = SshOptions(port=port, identity=identity, known_hosts=known_hosts)
    device = "".join(c if c.isalnum() or c in ".-" else "_" for c in host.split("@")[-1])
    doc = run_deploy(bundle, host, target, command_name, ssh=ssh, precision=precision, args=args or [], remote_dir=remote_dir,
                     remote_edgekit=remote_edgekit, out_dir=out / f"{Path(bundle).resolve().name}-{device}-{command_name}",
                     transfer=transfer, rebuild=rebuild, on_stderr=lambda line: o.info(f"[{host}] {line}"))
    for w in doc["warnings"]:
        o.warn(w)
    o.document(doc)
    report = doc["report"]
    # The same tables the command prints locally (cli.py's printers from issues 5 and 6).
    printer = {"profile": globals().get("_print_profile"), "check": globals().get("_print_check")}.get(command_name)
    if printer is not None:
        printer(o, report)
    else:
        o.pairs(f"{command_name} on {host} ({doc['target']}, {doc['precision']})",
                {k: v for k, v in report.items() if not isinstance(v, (dict, list))})
        for key, value in report.items():
            if isinstance(value, dict) and value and all(not isinstance(v, (dict, list)) for v in value.values()):
                o.pairs(key, value)
    o.line(f"copied {len(doc['copied']['files'])} files ({doc['copied']['bytes'] / 1e6:.1f} MB) by {doc['remote']['transfer']}; "
           f"reports in {doc['fetched'][0] if doc['fetched'] else '—'}")
    if doc["exit_code"]:
        raise typer.Exit(doc["exit_code"])


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
    qz = report["stages"]["quantize"]
    rows = []
    for kind, r in qz.items():
        qf, qi = r["quality_fp32"] or {}, r["quality_int8"] or {}
        for k in qf:
            rows.append((kind, k, qf[k], qi.get(k), ""))
        for c in r["budget"]:
            rows.append((kind, c["key"], "—", c["value"], f"{c['op']} {c['limit']:g}: " + ("pass" if c["passed"] else "FAIL")))
        rows.append((kind, "size MB", r["sizes"]["fp32_bytes"] / 1e6, r["sizes"]["int8_bytes"] / 1e6, f"{r['sizes']['ratio']:.2f}x"))
    o.table("quantize: FP32 vs INT8 side by side (held-out set, identical noise)", ["model", "metric", "FP32", "INT8", "budget"], rows)
    _print_demo_check(o, report["stages"]["check"])
    b = report["stages"]["build"]
    o.table("build: lint + engine for the cpu target", ["model", "lint", "engine", "MB", "runtime"],
            [(k, "pass" if s["lint_passed"] else f"{s['lint']['error']} error(s)", s["engine"], s["bytes"] / 1e6, s["runtime"]) for k, s in b.items()])
    prof = report["stages"]["profile"]
    t = prof["table"]
    o.table("profile: masked-demo on ort, side by side", t["variants"]["columns"], t["variants"]["rows"])
    if t["ratios"]["rows"]:
        o.table("ratios measured in the same run", t["ratios"]["columns"], t["ratios"]["rows"])
    if "ar" in t:
        o.table("NAR vs AR (speedup = AR ms / NAR ms)", t["ar"]["columns"], t["ar"]["rows"])
    for line in t["crossover"] + t["power"]:
        o.line(line)
    o.line(f"profile report: {prof['html']} (JSON: {prof['json']})")


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
