"""ONNX Runtime engines: the graph optimized once and saved (an optimized ``.onnx``, or ORT's mobile
``.ort`` format with the required-operators config of a minimal build), after fixing any dynamic
dims to the manifest's static shapes."""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._sidefiles import (
    INLINE_TENSOR_BYTES,
    external_data_locations,
    model_bytes,
    place_side_files,
    wants_external_data,
)
from edgekit.bundle import Bundle, sha256_file
from edgekit.errors import EdgekitError
from edgekit.host import HostFacts
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.ort import GRAPH_OPTIMIZATION_LEVELS
from edgekit.targets import Target


def fix_dynamic_shapes(onnx_path: Path, bundle: Bundle, workdir: Path) -> tuple[Path, dict[str, list[int]]]:
    """``onnx_path`` itself when its graph inputs are static; else a copy in ``workdir`` whose
    dynamic inputs are fixed to the manifest's shapes (and outputs re-inferred), and the shapes
    that were fixed."""
    onnx = require("onnx")
    from onnxruntime.tools.onnx_model_utils import (  # lazy: onnxruntime
        fix_output_shapes,
        make_input_shape_fixed,
    )

    model = load_onnx(onnx_path, "the model to build")  # the graph: weights in a side file stay there
    initializers = {i.name for i in model.graph.initializer}
    manifest_shapes = {n: list(s.shape) for n, s in bundle.inputs.items()}
    fixed: dict[str, list[int]] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = tensor.shape.dim if tensor.HasField("shape") else None
        if dims is not None and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            continue
        shape = manifest_shapes.get(value.name)
        if shape is None or (dims is not None and len(dims) != len(shape)):
            raise EdgekitError(
                f"{onnx_path.name}: input {value.name!r} has dynamic dims and the manifest gives no shape of its rank "
                f"for it (manifest inputs: {manifest_shapes})",
                hint="re-export with static shapes (edgekit export)",
            )
        make_input_shape_fixed(model.graph, value.name, shape)
        fixed[value.name] = shape
    if not fixed:
        return onnx_path, {}
    fix_output_shapes(model)  # shape inference on the graph alone
    out = workdir / f"static-{onnx_path.name}"
    onnx.save(model, str(out))  # names the source's side files, if any: linked beside it
    place_side_files(onnx_path, workdir)
    return out, fixed


def build_ort(model_path: Path, target: Target, host: HostFacts, workdir: Path) -> tuple[dict[str, Path], dict[str, Any]]:
    ort = require("onnxruntime")
    settings = target.ort
    arch = host.arch if target.arch == "host" else target.arch
    # "all" adds NCHWc layouts sized to this CPU's vectors: such a model belongs to this CPU only.
    host_specific = settings.format == "onnx" and settings.graph_optimization == "all"
    if settings.format == "ort":
        files = convert_to_ort(model_path, settings.optimization_style, arch, workdir)
        level = "basic + saved runtime optimizations" if settings.optimization_style == "runtime" else "all (no NCHWc)"
    else:
        out = workdir / "optimized.onnx"
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION_LEVELS[settings.graph_optimization])
        so.optimized_model_filepath = str(out)
        so.log_severity_level = 3  # ORT warns that "all" is hardware-specific: the entry records it
        weights = None
        if external_data_locations(model_path) or wants_external_data(model_bytes(model_path)):
            # Weights that need a side file (the rule in edgekit._sidefiles; over 2 GB ORT cannot
            # write them inline), or that have one: ORT would write the optimized model naming the
            # source's side file relative to the engine's folder, where it is not. Write them to
            # the engine's own side file (installed beside it under this name, which the model names).
            weights = workdir / f"weights-{sha256_file(model_path)[:8]}.onnx.data"
            so.add_session_config_entry("session.optimized_model_external_initializers_file_name", weights.name)
            so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", str(INLINE_TENSOR_BYTES))
        if arch == "aarch64":
            # Keep int8 QDQ activations signed (ARM's fast path) instead of x86's uint8 rewrite.
            so.add_session_config_entry("session.qdqisint8allowed", "1")
        try:
            ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own Fail/InvalidGraph types
            raise EdgekitError(
                f"ONNX Runtime {ort.__version__} cannot optimize {model_path.name} for target {target.name}: "
                f"{str(exc).splitlines()[0][:300]}",
                hint="run `edgekit lint BUNDLE --target T` and `edgekit run BUNDLE` to see why",
            ) from None
        files = {"model": out} | ({"external_data": weights} if weights is not None and weights.is_file() else {})
        level = settings.graph_optimization
    facts = {
        "runtime": "ort",
        "runtime_version": ort.__version__,
        "format": settings.format,
        "device": host.cpu_key if host_specific else arch,
        "portable": not host_specific,
        "compute_capability": None,
        "l4t": None,
        "config": {
            "graph_optimization": level,
            "optimization_style": settings.optimization_style if settings.format == "ort" else None,
            "providers": list(settings.providers),
        },
    }
    return files, facts


def convert_to_ort(model_path: Path, style: str, arch: str, workdir: Path) -> dict[str, Path]:
    """``.ort`` model and required-operators config via onnxruntime's converter (its progress
    prints go to a buffer: library code prints nothing)."""
    require("onnxruntime")
    root_handlers = list(logging.getLogger().handlers)
    from onnxruntime.tools.convert_onnx_models_to_ort import (  # lazy: onnxruntime
        OptimizationStyle,
        convert_onnx_models_to_ort,
    )

    # Importing it runs logging.basicConfig and sets its own logger to DEBUG: undo both, so a
    # library call neither reconfigures the application's logging nor prints INFO lines.
    logging.getLogger().handlers[:] = root_handlers
    logging.getLogger("ort_format_model.utils").setLevel(logging.WARNING)

    src_dir, out_dir = workdir / "ort-in", workdir / "ort-out"
    src_dir.mkdir()
    # The converter converts every .onnx under a directory: give it a directory of one.
    shutil.copyfile(model_path, src_dir / "model.onnx")
    place_side_files(model_path, src_dir)  # weights in a side file: the converter reads them beside it
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            convert_onnx_models_to_ort(
                src_dir / "model.onnx",
                output_dir=out_dir,
                optimization_styles=[OptimizationStyle.Runtime if style == "runtime" else OptimizationStyle.Fixed],
                target_platform="arm" if arch == "aarch64" else "amd64",
            )
    except Exception as exc:  # noqa: BLE001 - the converter re-raises whatever ORT raised
        tail = " | ".join(log.getvalue().strip().splitlines()[-3:])
        raise EdgekitError(
            f"onnxruntime could not convert {model_path.name} to .ort: {str(exc).splitlines()[0][:300]} ({tail})",
            hint="run `edgekit lint BUNDLE --target T` to see what the target cannot run",
        ) from None
    models, configs = sorted(out_dir.glob("*.ort")), sorted(out_dir.glob("*.config"))
    if len(models) != 1 or len(configs) != 1:
        raise EdgekitError(f"onnxruntime's converter wrote {[p.name for p in out_dir.iterdir()]}; expected one .ort and one .config")
    # Its header names the temp paths it converted: keep the operator lines, say what they are.
    ops = [line for line in configs[0].read_text().splitlines() if line and not line.startswith("#")]
    configs[0].write_text(
        "# Operators the .ort model next to this file needs: build a minimal onnxruntime with\n"
        "# ./build.sh --minimal_build --include_ops_by_config <this file>\n" + "\n".join(ops) + "\n"
    )
    return {"model": models[0], "required_operators": configs[0]}
