"""Decode a bundle's model once on a runtime: the host loop over the per-step network, a fused
graph (``export --graph``), or a target's built engine."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.arithmetic import int8_host_warnings
from edgekit.builder import select_engine
from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.decode.flow import initial_noise
from edgekit.decode.fused import decode_fused
from edgekit.errors import UsageError, unknown
from edgekit.evaluate import cond_file_rows, conditions, load_condition_data, pad_rows, score
from edgekit.limits import MAX_ROWS, check_count, check_options
from edgekit.runtimes import open_fused, open_runtime


@dataclass(frozen=True)
class RunRequest:
    runtime: str = "ort"  # ort | torch | trt
    precision: str = "fp32"  # which artifact: fp32 | int8
    seed: int = 0  # all decode noise (and demo conditions) derive from it
    batch: int | None = None  # decode rows; None = the graph's static batch
    cond: Mapping[str, str] = field(default_factory=dict)  # --cond NAME=VALUE (a number, or a .npy path)
    cond_data: Path | None = None  # --cond-data FILE.npz|DIR: real condition rows; the first `batch` rows decode
    decode: Mapping[str, Any] = field(default_factory=dict)  # decode options the user set (steps, solver, ...)
    threads: int = 0  # runtime intra-op threads; 0 = runtime default
    target: str | None = None  # a target name/TOML: its engine (edgekit build) instead of --runtime
    rebuild: bool = False  # rebuild a stale engine for the target instead of refusing it
    graph: str = "host"  # host: per-step network + host loop; step|unrolled: a fused graph (export --graph)

    def __post_init__(self) -> None:
        check_options({"--seed": self.seed, "--batch": self.batch, "--threads": self.threads})


def run_bundle(path: Path, req: RunRequest = RunRequest()) -> dict[str, Any]:
    """Decode ``path``'s model once on ``req.runtime``; returns a summary with ``output`` and
    ``cond`` arrays (not JSON) and the figures for the report."""
    bundle = Bundle.load(path)
    batch = req.batch or bundle.batch  # rows per decode call
    if not 1 <= batch <= bundle.batch:  # before conditions of that many rows are built
        raise UsageError(
            f"--batch {batch} is invalid for {bundle.name}; valid: 1..{bundle.batch} (the graph's static batch)"
        )
    # Conditioning from files (`--cond tokens=tokens.npz` of another bundle's run) brings its own
    # row count: every row is decoded, in ceil(rows / batch) calls (call i with seed + i, as
    # `evaluate` does), the last one padded with its final row.
    rows = cond_file_rows(req.cond) or batch
    cfg = decode_config(bundle.kind, bundle.decode_defaults, req.decode, seed=req.seed)
    real = None if req.cond_data is None else load_condition_data(bundle, req.cond_data).arrays
    if real is not None and cond_file_rows(req.cond) is None:
        rows = len(next(iter(real.values())))  # every row of --cond-data, in graph batches too
        check_count(f"--cond-data {req.cond_data}: rows (run decodes every one)", rows, MAX_ROWS, "give fewer rows")
    cond = conditions(bundle, req.cond, rows, req.seed, rows=real)
    if req.graph == "host":
        if req.target is not None:
            rt = select_engine(bundle, req.target, req.precision, req.rebuild).open(threads=req.threads)
        else:
            rt = open_runtime(bundle, req.runtime, req.precision, threads=req.threads)
        run = lambda c, cfg: decode(bundle.kind, rt, bundle.meta, c, cfg)  # noqa: E731
    elif req.graph in ("step", "unrolled"):
        if req.target is not None:
            raise UsageError(
                f"--graph {req.graph} runs the fused fp32 graph on --runtime ort or openvino; drop --target"
            )
        rt, entry = open_fused(bundle, req.graph, threads=req.threads, runtime=req.runtime, precision=req.precision)
        run = lambda c, cfg: decode_fused(bundle.kind, rt, entry, c, cfg)  # noqa: E731
    else:
        raise unknown("--graph", req.graph, ("host", "step", "unrolled"))
    calls = -(-rows // batch)
    parts, outputs, call_cfgs = [], [], []
    with rt:
        start = time.perf_counter_ns()
        for i in range(calls):
            chunk = {k: pad_rows(v[i * batch : (i + 1) * batch], batch) for k, v in cond.items()}
            call_cfgs.append(dataclasses.replace(cfg, seed=req.seed + i) if i else cfg)
            parts.append(run(chunk, call_cfgs[-1]))
            outputs.append(parts[-1].output.copy())  # the next call may reuse the runtime's buffer
        wall_ms = (time.perf_counter_ns() - start) / 1e6
        device = rt.device
        ran_on = rt.name  # with --target: the runtime the target picked
        settings = dict(rt.settings)  # OpenVINO: threads, streams, hint, inference precision
        warnings = int8_host_warnings(bundle.quantization, [req.precision], str(bundle.root))
        warnings += list(rt.warnings)
        timing_note = rt.timing_note  # e.g. the NPU emulated on x86
        session = rt.session_info
    output = np.concatenate(outputs)[:rows]
    result = parts[0]
    return {
        "schema": "edgekit.run/1",
        "bundle": str(bundle.root),
        "model": bundle.name,
        "kind": bundle.kind,
        "runtime": ran_on,
        "graph": req.graph,
        "device": device,
        "runtime_settings": settings,
        "precision": req.precision,
        "batch": rows,
        "decode_calls": calls,
        "seed": req.seed,
        "decode": {k: v for k, v in vars(cfg).items()},
        "steps": result.steps,
        # Network function evaluations of ONE decode (a solver's evaluations, guidance rows
        # included): the cost of the method, whatever the row count. It summed over the graph
        # batches a --cond file needs, so 5 rows at batch 2 read as 3x the NFE; the graph calls
        # of all of them are runtime_calls.
        "nfe": result.nfe,
        "runtime_calls": sum(p.runtime_calls for p in parts),
        "wall_ms": wall_ms,
        "timing_note": timing_note,
        "session": session,
        "quality": score(bundle, output, cond),
        "warnings": warnings,
        "output": output,
        "cond": cond,
        # flow: the loop's starting noise (x0 = temperature · default_rng(seed).standard_normal),
        # so the decode can be reproduced in another framework from the .npz alone: one draw per
        # graph call (call i seeds seed + i), its rows as the output's
        "x0": (
            np.concatenate([initial_noise(c, p.output.shape) for c, p in zip(call_cfgs, parts, strict=True)])[:rows]
            if bundle.kind == "flow"
            else None
        ),
    }
