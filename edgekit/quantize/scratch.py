"""What quantize keeps in its scratch folder beyond the model copies, counted before it starts.

Two things wait on disk while a run goes on: the recorded calibration calls (``runtimes.
recording.SpilledFeeds``: every call's feeds, an AR step's whole KV cache among them, thinned to
``calibrate.RECORD_MAX_BYTES``) and the kept answers (``runtimes.memo``: FP32's answers on the
held-out decodes for the whole run, and one candidate's at a time, its own decode and its answers
on FP32's trajectory), each past the memo's ``RAM_BYTES`` in memory. On aMUSEd-256 the answers
alone are 16 held-out decodes x 12 calls x 8 MB of logits a call, about 1.5 GB per memo: the
preflight counts them rather than let a disk fill up an hour into the run.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._sidefiles import model_bytes
from edgekit.bundle import Bundle
from edgekit.decode import NFE_PER_STEP
from edgekit.decode.dispatch import decode_config
from edgekit.quantize.calibrate import RECORD_MAX_BYTES
from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.decodes import tokens_per_row
from edgekit.resources import BASE_MEMORY, QUANTIZE_BUNDLE_DISK, QUANTIZE_MEMORY, QUANTIZE_SCRATCH_DISK, Need, gib
from edgekit.runtimes.memo import RAM_BYTES
from edgekit.spec import TensorSpec


def io_bytes(specs: Mapping[str, TensorSpec]) -> int:
    """Bytes of one call's tensors of ``specs`` (static shapes)."""
    return sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize for s in specs.values())


def calls_per_decode(kind: str, meta: Mapping[str, Any], defaults: Mapping[str, Any], decode: Mapping[str, Any]) -> int:
    """Network calls of one decode, at most: steps (x the solver's evaluations for flow, the
    tokens for AR), twice where guidance runs an unconditional pass."""
    cfg = decode_config(kind, defaults, decode)
    if kind == "ar":
        calls = int(cfg.length or meta.get("max_len", 1))
    elif kind == "flow":
        calls = int(cfg.steps) * NFE_PER_STEP[cfg.solver]  # the config checked the solver's name
    else:
        calls = int(cfg.steps)
    return calls * (2 if float(getattr(cfg, "guidance", 1.0)) != 1.0 else 1)


def kept_calls_bytes(
    kind: str,
    inputs: Mapping[str, TensorSpec],
    outputs: Mapping[str, TensorSpec],
    batch: int,
    meta: Mapping[str, Any],
    defaults: Mapping[str, Any],
    decode: Mapping[str, Any],
    calib_samples: int,
    eval_samples: int,
) -> int:
    """Bytes quantize's scratch folder holds at once for the recording and the kept answers: the
    recorded calls (at most ``RECORD_MAX_BYTES`` and one call), FP32's answers and one
    candidate's (two decodes' worth) past what each memo keeps in memory."""
    calls = calls_per_decode(kind, meta, defaults, decode)
    recorded = io_bytes(inputs) * calls * math.ceil(calib_samples / batch)
    recording = min(recorded, RECORD_MAX_BYTES + io_bytes(inputs))
    answers = io_bytes(outputs) * calls * math.ceil(eval_samples / batch)
    return recording + max(0, answers - RAM_BYTES) + max(0, 2 * answers - RAM_BYTES)


def quantize_needs(bundle: Bundle, cfg: QuantizeConfig) -> list[Need]:
    """What quantize will hold of this host for ``bundle``'s FP32 weights (factors measured at
    real size, ``resources.py``): memory; in TMPDIR the scratch copies, the recorded calls and the
    kept answers (``scratch.kept_calls_bytes``); the int8 graph(s)."""
    cfg, _ = cfg.with_samples(bundle.kind, tokens_per_row(bundle, cfg.decode), bundle.batch)
    fp32 = Path(bundle.path_of("fp32"))
    weights = model_bytes(fp32)
    kept = kept_calls_bytes(
        bundle.kind,
        bundle.inputs,
        bundle.outputs,
        bundle.batch,
        bundle.meta,
        bundle.decode_defaults,
        cfg.decode,
        *cfg.samples,
    )
    scratch = int(QUANTIZE_SCRATCH_DISK * weights) + kept
    what = f"the scratch copies and {gib(kept)} of recorded calls and kept answers"
    return [
        Need(
            "memory",
            int(QUANTIZE_MEMORY * weights) + BASE_MEMORY,
            f"{QUANTIZE_MEMORY}x its {gib(weights)} of FP32 weights",
        ),
        Need("disk", scratch, what, Path(tempfile.gettempdir())),
        Need("disk", int(QUANTIZE_BUNDLE_DISK * weights), "the int8 graph", bundle.root),
    ]
