"""Issue #27's QNN point: every step bucket's graph in ONE context binary with shared weights,
against one context per bucket (what `edgekit build` ships today):

    python benchmarks/qnn_shared_context.py BUNDLE      # a bundle quantized --profile qnn --step-buckets N
    python benchmarks/qnn_shared_context.py --tiny      # builds one from the test suite's tiny flow model

It compiles each bucket graph for the HTP with onnxruntime-qnn's weight sharing
(``ep.share_ep_contexts`` on every session, ``ep.stop_share_ep_contexts`` on the last: one
``*_qnn.bin`` for all of them, the EPContext models outside it), then loads those contexts the
same way and compares each bucket's output on one input with the bucket graph compiled alone.

On the x86 HTP emulation (onnxruntime-qnn 2.7, QNN SDK 2.51, 2026-12-02) the shared binary is
written, and loading it fails: ``contextCreateFromBinary failed ... QNN_COMMON_ERROR_NOT_SUPPORTED``.
Upstream generates shared contexts offline on x64 for the device (microsoft/onnxruntime#23945)
and reports the same load failure off the device (#24962). Run it on the Snapdragon device to
settle the point; it prints what loaded and how far each output is from the separate graph's.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def tiny_bundle(root: Path) -> Path:
    """The test suite's tiny flow model (batch 1), quantized --profile qnn with 2 step buckets."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch

    from edgekit.export.to_bundle import export_bundle
    from edgekit.quantize import QuantizeConfig, quantize_bundle
    from tests.tiny_models import tiny_flow_spec

    torch.manual_seed(0)
    spec = tiny_flow_spec(batch=1)
    bundle = export_bundle(spec, root / "flow", source=spec.name).root
    quantize_bundle(
        bundle,
        QuantizeConfig(
            profile="qnn",
            calib_samples=2,
            eval_samples=2,
            step_buckets=2,
            budget={"snr_db": 10.0, "check_margin": -1.0},
        ),
    )
    return bundle


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle", nargs="?", type=Path)
    ap.add_argument(
        "--tiny", action="store_true", help="build the tiny flow bundle (needs torch and a checkout's tests/)"
    )
    args = ap.parse_args()
    import onnxruntime as ort

    from edgekit.bundle import Bundle
    from edgekit.runtimes.qnn import QnnOptions, register, versions

    tmp = Path(tempfile.mkdtemp(prefix="edgekit-qnn-shared-"))
    root = tiny_bundle(tmp) if args.tiny else args.bundle
    if root is None:
        ap.error("give BUNDLE or --tiny")
    bundle = Bundle.load(root)
    buckets = bundle.step_buckets()
    if buckets is None:
        ap.error(f"{root}: its int8 model has no step buckets (quantize it with --profile qnn --step-buckets N)")
    graphs = [bundle.path_of(a) for a in buckets.graphs]
    devices = register(ort)
    provider = QnnOptions().provider_options()

    def options(**entries: str) -> Any:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        for key, value in entries.items():
            so.add_session_config_entry(key, value)
        so.add_provider_for_devices(devices, provider)
        return so

    def last(i: int) -> dict[str, str]:
        return {"ep.stop_share_ep_contexts": "1"} if i == len(graphs) - 1 else {}

    out = tmp / "shared"
    out.mkdir()
    for i, graph in enumerate(graphs):
        ort.InferenceSession(
            str(graph),
            options(
                **{
                    "ep.context_enable": "1",
                    "ep.context_embed_mode": "0",
                    "ep.share_ep_contexts": "1",
                    "ep.context_file_path": str(out / f"bucket{i}_ctx.onnx"),
                },
                **last(i),
            ),
        )
    written = sorted(p.name for p in out.iterdir())
    print(
        f"{versions()}; {len(graphs)} bucket graphs; written: {', '.join(written)} "
        f"({sum(p.suffix == '.bin' for p in out.iterdir())} context binary)"
    )
    rng = np.random.default_rng(0)
    feeds = {
        k: rng.standard_normal(v.shape).astype(v.dtype) if v.dtype == np.float32 else np.zeros(v.shape, v.dtype)
        for k, v in bundle.inputs.items()
    }
    separate = [ort.InferenceSession(str(g), options()).run(None, feeds)[0] for g in graphs]
    status = 0
    for i in range(len(graphs)):
        try:
            session = ort.InferenceSession(
                str(out / f"bucket{i}_ctx.onnx"), options(**{"ep.share_ep_contexts": "1"}, **last(i))
            )
        except Exception as exc:  # the emulation's refusal is the finding
            print(f"bucket {i}: the shared context does not load here: {str(exc).splitlines()[0][:300]}")
            status = 1
            break
        got = session.run(None, feeds)[0]
        print(
            f"bucket {i}: loaded from the shared context; max |difference| from the graph compiled alone "
            f"{float(np.abs(got - separate[i]).max()):.3g}"
        )
    shutil.rmtree(tmp, ignore_errors=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
