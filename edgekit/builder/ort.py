"""ONNX Runtime engines: the graph with edgekit's graph changes baked in, optimized once and saved
(an optimized ``.onnx``, or ORT's mobile ``.ort`` format with the required-operators config of a
minimal build), after fixing any dynamic dims to the manifest's static shapes.

What edgekit's runtime does to a graph in memory for the target's providers
(``runtimes.ort_fusions.graph_changes``: contrib fusions, ORT optimizers switched off) is done to
the file here, so an app's plain ``InferenceSession`` on it runs the graph ``edgekit run`` runs.
What no file can carry (session config entries, the level to load it at) is recorded in the
engine entry's ``session_options`` and in the file's metadata (``edgekit.session_options``, read
with ``session.get_modelmeta().custom_metadata_map``): the exact options an app sets, and the
ones ``edgekit run --target`` opens it with."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._sidefiles import (
    INLINE_TENSOR_BYTES,
    external_data_locations,
    model_bytes,
    place_side_files,
    side_files_beside,
    wants_external_data,
)
from edgekit.bundle import Bundle, sha256_file
from edgekit.errors import EdgekitError
from edgekit.host import HostFacts
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.ort import GRAPH_OPTIMIZATION_LEVELS
from edgekit.runtimes.ort_fusions import DISABLE_OPTIMIZERS_ENTRY, GraphChanges, apply_contrib_fusions, graph_changes
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


# The model metadata key that carries an engine's session options (JSON) inside the file.
SESSION_OPTIONS_KEY = "edgekit.session_options"
# An .ort model built with the "runtime" style keeps its extended optimizations (the QDQ kernels of
# an int8 model among them) as records that ORT replays at load only when told to: without this
# entry the int8 masked demo ran 0.55x as fast, through float kernels and with other outputs.
REPLAY_ENTRY = "session.enable_saved_runtime_optimizations"


def build_ort(
    model_path: Path, target: Target, host: HostFacts, workdir: Path
) -> tuple[dict[str, Path], dict[str, Any]]:
    ort = require("onnxruntime")
    settings = target.ort
    arch = host.arch if target.arch == "host" else target.arch
    # "all" adds NCHWc layouts sized to this CPU's vectors: such a model belongs to this CPU only.
    host_specific = settings.format == "onnx" and settings.graph_optimization == "all"
    changes = graph_changes(settings.providers)
    options = session_options_for(settings.format, settings.graph_optimization, settings.optimization_style, changes)
    graph, fused = changed_graph(model_path, changes, options, workdir)
    with side_files_beside(model_path, workdir):  # the changed graph names the source's weights file, if any
        if settings.format == "ort":
            files = convert_to_ort(graph, settings.optimization_style, arch, workdir, changes.disabled_optimizers)
            problem = _replay_problem(ort, files["model"], options)
            if problem:  # the saved optimizations do not load: say so, and ship a file that loads as recorded
                options = {**options, "config_entries": {}, "note": problem}
                graph, fused = changed_graph(model_path, changes, options, workdir, "changed-again.onnx")
                files = convert_to_ort(
                    graph, settings.optimization_style, arch, workdir / "again", changes.disabled_optimizers
                )
            level = (
                "basic + saved runtime optimizations"
                if settings.optimization_style == "runtime"
                else ("all (no NCHWc)" if arch == "aarch64" else "all")
            )
        else:
            files = _optimized_onnx(ort, graph, model_path, settings.graph_optimization, arch, changes, workdir, target)
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
        # What edgekit changed in the graph (the file carries it) and how to open the file.
        "graph_changes": {"fusions": fused, "disabled_optimizers": list(changes.disabled_optimizers)},
        "session_options": options,
    }
    return files, facts


def session_options_for(fmt: str, built_level: str, style: str, changes: GraphChanges) -> dict[str, Any]:
    """The session options an app sets to run an engine as ``edgekit run --target`` does: the
    graph optimization level to load it at and ORT session config entries (key -> value).

    An .onnx saved at "all" has nothing left to optimize: loaded at "basic" (what ORT advises for
    a saved optimized model), nothing runs that the build switched off. One saved at "extended"
    (a cross-device target) gets the device's layout optimizations at load ("all"), with the
    optimizers edgekit switches off named in the config entry every ORT binding can set. An .ort
    file is not optimized further at load; a "runtime" style one needs its saved optimizations
    replayed."""
    if fmt == "ort":
        return {"graph_optimization_level": "all", "config_entries": {REPLAY_ENTRY: "1"} if style == "runtime" else {}}
    level = "basic" if built_level == "all" else "all"
    entries = (
        {DISABLE_OPTIMIZERS_ENTRY: ",".join(changes.disabled_optimizers)}
        if changes.disabled_optimizers and level != "basic"
        else {}
    )
    return {"graph_optimization_level": level, "config_entries": entries}


def _replay_problem(ort: Any, model: Path, options: Mapping[str, Any]) -> str | None:
    """Why the .ort ``model`` does not load with ``options``' replay of its saved runtime
    optimizations, or None (it loads, or nothing asks for the replay). ONNX Runtime's own
    converter writes records some graphs' replay refuses (1.32: a QDQ MatMul on a 3-D input,
    "Not enough produced nodes in the runtime optimization record")."""
    if REPLAY_ENTRY not in (options.get("config_entries") or {}):
        return None
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry(REPLAY_ENTRY, "1")
    try:
        ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own Fail type
        reason = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)[:200]
        return (
            f"ONNX Runtime {ort.__version__} cannot replay this graph's saved runtime optimizations ({reason}): "
            'the .ort runs without them (QDQ nodes as float ops); optimization_style = "fixed" bakes them in'
        )
    return None


def changed_graph(
    model_path: Path, changes: GraphChanges, options: Mapping[str, Any], workdir: Path, name: str = "changed.onnx"
) -> tuple[Path, dict[str, int]]:
    """(``model_path``'s graph with ``changes``' contrib fusions and ``options`` in its metadata,
    written to ``workdir``; {fusion: count}). Weights in a side file stay there (the graph names
    it: open it with ``side_files_beside``); weights inside a model the external-data rule says
    should not be are written to a side file of the graph's own."""
    onnx = require("onnx")
    model = onnx.load(str(model_path), load_external_data=False)  # the graph: weights in a side file stay there
    fused = apply_contrib_fusions(model) if changes.contrib_fusions else {}
    onnx.helper.set_model_props(
        model,
        {**{p.key: p.value for p in model.metadata_props}, SESSION_OPTIONS_KEY: json.dumps(options, sort_keys=True)},
    )
    out = workdir / name
    if not external_data_locations(model_path) and wants_external_data(model_bytes(model_path)):
        onnx.save(
            model,
            str(out),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=f"{out.name}.data",
            size_threshold=INLINE_TENSOR_BYTES,
        )
    else:
        onnx.save(model, str(out))
    return out, fused


def _optimized_onnx(
    ort: Any, graph: Path, source: Path, level: str, arch: str, changes: GraphChanges, workdir: Path, target: Target
) -> dict[str, Path]:
    """The graph optimized at ``level`` (without ``changes``' disabled optimizers) and saved by ORT."""
    out = workdir / "optimized.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION_LEVELS[level])
    so.optimized_model_filepath = str(out)
    so.log_severity_level = 3  # ORT warns that "all" is hardware-specific: the entry records it
    weights = None
    if external_data_locations(source) or wants_external_data(model_bytes(source)):
        # Weights that need a side file (the rule in edgekit._sidefiles; over 2 GB ORT cannot
        # write them inline), or that have one: ORT would write the optimized model naming the
        # source's side file relative to the engine's folder, where it is not. Write them to
        # the engine's own side file (installed beside it under this name, which the model names).
        weights = workdir / f"weights-{sha256_file(source)[:8]}.onnx.data"
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", weights.name)
        so.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", str(INLINE_TENSOR_BYTES)
        )
    if arch == "aarch64":
        # Keep int8 QDQ activations signed (ARM's fast path) instead of x86's uint8 rewrite.
        so.add_session_config_entry("session.qdqisint8allowed", "1")
    try:
        ort.InferenceSession(
            str(graph),
            so,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=list(changes.disabled_optimizers) or None,
        )
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own Fail/InvalidGraph types
        raise EdgekitError(
            f"ONNX Runtime {ort.__version__} cannot optimize {source.name} for target {target.name}: "
            f"{str(exc).splitlines()[0][:300]}",
            hint="run `edgekit lint BUNDLE --target T` and `edgekit run BUNDLE` to see why",
        ) from None
    return {"model": out} | ({"external_data": weights} if weights is not None and weights.is_file() else {})


def convert_to_ort(graph: Path, style: str, arch: str, workdir: Path, disabled: Sequence[str] = ()) -> dict[str, Path]:
    """``.ort`` model and required-operators config, as onnxruntime's converter makes them
    (``tools/convert_onnx_models_to_ort.py``: level "all", NCHWc only for x86, the "runtime"
    style's saved optimizations, the config from the model with and without them), with the
    optimizers edgekit switches off (``disabled``) off here too, which the converter cannot do."""
    ort = require("onnxruntime")
    root_handlers = list(logging.getLogger().handlers)
    from onnxruntime.tools.ort_format_model import create_config_from_models  # lazy: onnxruntime

    # Importing it runs logging.basicConfig and sets its own logger to DEBUG: undo both, so a
    # library call neither reconfigures the application's logging nor prints INFO lines.
    logging.getLogger().handlers[:] = root_handlers
    logging.getLogger("ort_format_model.utils").setLevel(logging.WARNING)

    out_dir = workdir / "ort-out"
    out_dir.mkdir(parents=True)
    entries = {"session.save_model_format": "ORT", "session.qdqisint8allowed": "1" if arch == "aarch64" else "0"}
    skip = [*disabled, *(["NchwcTransformer"] if arch == "aarch64" else [])]  # NCHWc: x86 vector layouts
    model = out_dir / "model.ort"
    saved = [
        (model, {**entries, **({"optimization.minimal_build_optimizations": "save"} if style == "runtime" else {})})
    ]
    if style == "runtime":  # the ops a minimal build needs whether or not the device replays them
        saved.append((out_dir / "applied.ort", {**entries, "optimization.minimal_build_optimizations": "apply"}))
    for path, config in saved:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = str(path)
        so.log_severity_level = 3  # ORT warns that NCHWc layouts are hardware-specific
        for key, value in config.items():
            so.add_session_config_entry(key, value)
        try:
            ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"], disabled_optimizers=skip or None)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own Fail/InvalidGraph types
            raise EdgekitError(
                f"onnxruntime could not convert {graph.name} to .ort: {str(exc).splitlines()[0][:300]}",
                hint="run `edgekit lint BUNDLE --target T` to see what the target cannot run",
            ) from None
    config_path = out_dir / "model.required_operators.config"
    create_config_from_models([p for p, _ in saved], config_path, False)
    # Its header names the scratch paths it read: keep the operator lines, say what they are.
    ops = [line for line in config_path.read_text().splitlines() if line and not line.startswith("#")]
    config_path.write_text(
        "# Operators the .ort model next to this file needs: build a minimal onnxruntime with\n"
        "# ./build.sh --minimal_build --include_ops_by_config <this file>\n" + "\n".join(ops) + "\n"
    )
    return {"model": model, "required_operators": config_path}
