"""Stages composed over a bundle: decode it on a runtime (`edgekit run`) and the demo pipeline.

This is the one place that joins bundle, runtime, decode loop and ground truth; the stages
themselves stay independent of each other.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from edgekit.bundle import STAGING_PREFIX, Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.errors import UsageError
from edgekit.runtimes import open_runtime


@dataclass(frozen=True)
class RunRequest:
    runtime: str = "ort"  # ort | torch | trt
    precision: str = "fp32"  # which artifact: fp32 | int8
    seed: int = 0  # all decode noise (and demo conditions) derive from it
    batch: int | None = None  # decode rows; None = the graph's static batch
    cond: Mapping[str, str] = field(default_factory=dict)  # --cond NAME=VALUE (a number, or a .npy path)
    decode: Mapping[str, Any] = field(default_factory=dict)  # decode options the user set (steps, solver, ...)
    threads: int = 0  # runtime intra-op threads; 0 = runtime default
    target: str | None = None  # a target name/TOML: its engine (edgekit build) instead of --runtime
    rebuild: bool = False  # rebuild a stale engine for the target instead of refusing it
    graph: str = "host"  # host: per-step network + host loop; step|unrolled: a fused graph (export --graph)


def graph_batch(bundle: Bundle) -> int:
    return next(iter(bundle.inputs.values())).shape[0]


def conditions(bundle: Bundle, raw: Mapping[str, str], batch: int, seed: int) -> dict[str, np.ndarray]:
    """Conditioning arrays [batch, ...] for every conditioning input of ``bundle``: from
    ``--cond NAME=VALUE`` (a number fills the input; a path loads a .npy), else from the demo
    model's held-out evaluation set, else an error naming what is needed."""
    names = list(bundle.meta.get("conditioning", {}))
    unknown = [n for n in raw if n not in names]
    if unknown:
        raise UsageError(f"--cond {unknown[0]!r} is not a conditioning input of {bundle.name}; valid: {', '.join(names) or 'none'}")
    specs = bundle.inputs
    out: dict[str, np.ndarray] = {}
    task = bundle.ground_truth
    demo = None
    for name in names:
        spec = specs[name]
        shape = (batch, *spec.shape[1:])
        if name in raw:
            out[name] = _parse_cond(name, raw[name], shape, spec.dtype)
            continue
        if task is None:
            raise UsageError(
                f"{bundle.name} needs conditioning input {name!r} ({spec.dtype}{list(shape)})",
                hint=f"pass --cond {name}=VALUE (a number) or --cond {name}=FILE.npy",
            )
        if demo is None:
            from edgekit.models.corpus import demo_conditions

            demo = demo_conditions(task, batch, seed)
        out[name] = demo[name].astype(spec.dtype)
    return out


def _parse_cond(name: str, value: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if value.endswith(".npy"):
        try:
            arr = np.load(value, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--cond {name}={value}: cannot read it as .npy ({exc})") from None
        if arr.shape != shape:
            raise UsageError(f"--cond {name}={value} has shape {list(arr.shape)}, expected {list(shape)}")
        return arr.astype(dtype)
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"--cond {name}={value!r} is neither a number nor a .npy file") from None
    if dtype.startswith("int") and number != int(number):
        raise UsageError(f"--cond {name}={value} must be an integer ({dtype})")
    return np.full(shape, number, dtype=dtype)


def score(bundle: Bundle, output: np.ndarray, cond: Mapping[str, np.ndarray]) -> dict[str, float] | None:
    """Ground-truth quality of a decode output, where the bundle's model has one (demo models)."""
    if not bundle.ground_truth:
        return None
    from edgekit.models.corpus import score as corpus_score

    return corpus_score(bundle.ground_truth, output, cond)


def run_bundle(path: Path, req: RunRequest = RunRequest()) -> dict[str, Any]:
    """Decode ``path``'s model once on ``req.runtime``; returns a summary with ``output`` and
    ``cond`` arrays (not JSON) and the figures for the report."""
    bundle = Bundle.load(path)
    batch = req.batch or graph_batch(bundle)
    cfg = decode_config(bundle.kind, bundle.manifest.get("decode_defaults", {}), req.decode, seed=req.seed)
    cond = conditions(bundle, req.cond, batch, req.seed)
    if req.graph == "host":
        rt = open_runtime(bundle, req.runtime, req.precision, threads=req.threads, target=req.target, rebuild=req.rebuild)
        run = lambda: decode(bundle.kind, rt, bundle.meta, cond, cfg)  # noqa: E731
    elif req.graph in ("step", "unrolled"):
        from edgekit.decode.fused import decode_fused, open_fused

        if req.runtime != "ort" or req.precision != "fp32" or req.target is not None:
            raise UsageError(f"--graph {req.graph} runs the fused fp32 graph on ORT only; drop --runtime/--precision/--target")
        rt, entry = open_fused(bundle, req.graph, threads=req.threads)
        run = lambda: decode_fused(bundle.kind, rt, entry, cond, cfg)  # noqa: E731
    else:
        raise UsageError(f"--graph {req.graph!r} is unknown; valid: host, step, unrolled")
    with rt:
        start = time.perf_counter_ns()
        result = run()
        wall_ms = (time.perf_counter_ns() - start) / 1e6
        device = getattr(rt, "device", req.runtime)
        warnings = list(getattr(rt, "warnings", []))
    return {
        "schema": "edgekit.run/1",
        "bundle": str(bundle.root),
        "model": bundle.name,
        "kind": bundle.kind,
        "runtime": req.runtime,
        "graph": req.graph,
        "device": device,
        "precision": req.precision,
        "batch": batch,
        "seed": req.seed,
        "decode": {k: v for k, v in vars(cfg).items()},
        "steps": result.steps,
        "nfe": result.nfe,
        "runtime_calls": result.runtime_calls,
        "wall_ms": wall_ms,
        "quality": score(bundle, result.output, cond),
        "warnings": warnings,
        "output": result.output,
        "cond": cond,
    }


def save_outputs(path: Path, output_name: str, output: np.ndarray, cond: Mapping[str, np.ndarray]) -> None:
    """Write an .npz atomically: ``output_name`` plus ``cond_<name>`` for each condition."""
    if path.suffix != ".npz":
        raise UsageError(f"-o {path} must end in .npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, **{output_name: output}, **{f"cond_{k}": v for k, v in cond.items()})
    tmp = path.with_name(f"{STAGING_PREFIX}{path.name}")
    try:
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def output_name(kind: str) -> str:
    return "frames" if kind == "flow" else "tokens"



def evaluate(
    bundle: Bundle,
    runtime: Any,
    n: int,
    seed: int = 0,
    decode_options: Mapping[str, Any] | None = None,
    cond: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Decode ``n`` rows (in batches of the graph's batch) on an open ``runtime``; returns the
    stacked ``output``, ``cond`` and the ground-truth ``quality`` where the model has one.
    Batch ``i`` uses seed ``seed + i``: the same rows get the same noise on every runtime."""
    batch = graph_batch(bundle)
    n_batches = -(-n // batch)
    outputs, conds = [], []
    for i in range(n_batches):
        if cond is None:
            c = conditions(bundle, {}, batch, seed + i)
        else:
            c = {k: _pad_rows(v[i * batch : (i + 1) * batch], batch) for k, v in cond.items()}
        cfg = decode_config(bundle.kind, bundle.manifest.get("decode_defaults", {}), decode_options or {}, seed=seed + i)
        outputs.append(decode(bundle.kind, runtime, bundle.meta, c, cfg).output.copy())
        conds.append(c)
    output = np.concatenate(outputs)[:n]
    cond_all = {k: np.concatenate([c[k] for c in conds])[:n] for k in conds[0]}
    return {"output": output, "cond": cond_all, "quality": score(bundle, output, cond_all)}


def _pad_rows(arr: np.ndarray, rows: int) -> np.ndarray:
    """The last batch may be short: repeat its final row to the graph's static batch."""
    if len(arr) == rows:
        return arr
    return np.concatenate([arr, np.repeat(arr[-1:], rows - len(arr), axis=0)])


@dataclass(frozen=True)
class DemoConfig:
    out: Path = Path("edgekit-demo")  # one bundle per demo model below it
    batch: int = 8  # static graph batch: 8 rows per network call
    n: int = 32  # evaluation sequences per model (held-out conditions)
    seed: int = 0


def run_demo(cfg: DemoConfig, progress: Any = None) -> dict[str, Any]:
    """The whole pipeline on the built-in models and the default CPU target: export + verify
    each, decode with the masked generator, feed its tokens to the flow decoder, decode the AR
    baseline, and score everything against the corpus's ground truth."""
    from edgekit.export import ExportConfig
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    step = progress or (lambda message: None)
    report: dict[str, Any] = {"schema": "edgekit.demo/1", "out": str(cfg.out), "stages": {}}
    bundles: dict[str, Bundle] = {}
    for name in ("masked-demo", "flow-demo", "ar-demo"):
        step(f"export {name}")
        b = export_bundle(load_spec(name, batch=cfg.batch), cfg.out / name.removesuffix("-demo"), ExportConfig(), source=name)
        bundles[b.kind] = b
        ver = b.manifest["verification"]["fp32"]
        report["stages"].setdefault("export", {})[name] = {
            "bundle": str(b.root),
            "bytes": b.artifact("fp32").bytes,
            "verified": ver["passed"],
            "max_abs_error": max(o["max_abs"] for o in ver["outputs"].values()),
        }
    quality: dict[str, Any] = {}
    step("decode masked-demo (MaskGIT) on ort fp32")
    with open_runtime(bundles["masked"], "ort", "fp32") as rt:
        masked = evaluate(bundles["masked"], rt, cfg.n, cfg.seed)
    quality["masked"] = masked["quality"]
    step("decode flow-demo (flow matching) on the masked tokens")
    with open_runtime(bundles["flow"], "ort", "fp32") as rt:
        flow = evaluate(bundles["flow"], rt, cfg.n, cfg.seed, cond={"tokens": masked["output"]})
    quality["flow"] = flow["quality"]
    step("decode ar-demo (KV-cache baseline) on ort fp32")
    with open_runtime(bundles["ar"], "ort", "fp32") as rt:
        quality["ar"] = evaluate(bundles["ar"], rt, cfg.n, cfg.seed)["quality"]
    from edgekit.models.corpus import default_corpus

    quality["corpus"] = default_corpus().reference_token_metrics
    report["stages"]["decode"] = {"runtime": "ort", "precision": "fp32", "n": cfg.n, "seed": cfg.seed, "quality": quality}

    from edgekit.quantize.stage import demo_quantize

    step("quantize each model to INT8 (cpu profile), calibrated on FP32 decode trajectories")
    report["stages"]["quantize"] = demo_quantize(bundles, n=min(cfg.n, 16), seed=cfg.seed)

    from edgekit.check import demo_check

    step("check: INT8 vs FP32 on ORT per model, the CI accuracy gate")
    report["stages"]["check"] = demo_check(bundles, n=min(cfg.n, 16), seed=cfg.seed)

    from edgekit.build import demo_build_stage

    step("lint and build each bundle for the cpu target (optimized ONNX)")
    report["stages"]["build"] = {kind: demo_build_stage(b.root, "cpu", "fp32") for kind, b in bundles.items()}

    from edgekit.profiler import demo_profile

    step("profile masked-demo against the AR baseline and write the HTML report")
    report["stages"]["profile"] = demo_profile(bundles, cfg.out)
    return report
