"""torch -> ONNX with static shapes and all randomness as inputs.

Uses the torch.export-based exporter (``dynamo=True``): no dynamic shapes are declared, so every
dimension is the ModelSpec's static size.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._sidefiles import external_data_locations, external_data_threshold, wants_external_data
from edgekit.bundle import sha256_file
from edgekit.errors import ExportError
from edgekit.export.config import MIN_OPSET, ExportConfig
from edgekit.export.opset import downgrade_split
from edgekit.spec import ModelSpec

log = logging.getLogger(__name__)

# Ops that make a graph non-deterministic or data-dependent in shape: edgekit graphs take noise
# as inputs so every runtime sees identical randomness for one seed.
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


# The exporter logs one warning per torchvision op it could register ("torchvision is not
# installed. Skipping torchvision::nms", four of them) on every export; edgekit models use no
# torchvision op, so these lines are noise. Only they are dropped: other exporter warnings stay.
_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"


def _not_torchvision_skip(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("torchvision is not installed")


@contextmanager
def quiet_exporter() -> Iterator[None]:
    """Silence the exporter's torchvision-not-installed warnings for the duration of an export,
    and torch's own error logging (a failed export logs screens of tracebacks before it raises;
    edgekit says the cause in one line), unless logging is at DEBUG (EDGEKIT_DEBUG=1)."""
    logger = logging.getLogger(_REGISTRATION_LOGGER)
    logger.addFilter(_not_torchvision_skip)
    quiet = not logging.getLogger().isEnabledFor(logging.DEBUG)
    if quiet:
        logging.disable(logging.ERROR)
    try:
        yield
    finally:
        if quiet:
            logging.disable(logging.NOTSET)
        logger.removeFilter(_not_torchvision_skip)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def export_failure(spec: ModelSpec, exc: BaseException) -> ExportError:
    """One clean line for a failed export: the innermost cause's first line (torch wraps it in
    pages of advice with terminal colours), and the shapes the factory declared."""
    root = exc
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    text = _ANSI.sub("", str(root)).strip()
    first = text.splitlines()[0] if text else type(root).__name__
    shapes = ", ".join(f"{n} {s.dtype}{list(s.shape)}" for n, s in spec.inputs.items())
    return ExportError(
        f"torch.onnx.export failed for {spec.name!r}: {type(root).__name__}: {first[:300]}",
        hint=f"the factory declares inputs {shapes}: check them against what the module's forward takes",
    )


def example_inputs(spec: ModelSpec) -> tuple[Any, ...]:
    """Zero tensors in the spec's input order (shapes and dtypes are all the exporter needs)."""
    torch = require("torch")
    return tuple(torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in spec.inputs.values())


def export_onnx(spec: ModelSpec, path: Path, cfg: ExportConfig) -> dict[str, Any]:
    """Write ``spec.module`` as ONNX to ``path``; returns facts for the manifest.
    Raises ExportError on exporter failure, forbidden ops, dynamic dims or an IO mismatch."""
    torch = require("torch")
    require("onnxscript")  # the exporter's backend; fail early with the install line
    import onnx

    external_data_threshold(cfg.external_data_mb)  # a bad knob is one line now, not after the export
    if cfg.opset < MIN_OPSET:
        raise ExportError(f"--opset {cfg.opset} is too old; use {MIN_OPSET} or newer")
    if cfg.opset > onnx.defs.onnx_opset_version():
        raise ExportError(
            f"--opset {cfg.opset} is newer than this onnx ({onnx.__version__}) knows; "
            f"valid: {MIN_OPSET}..{onnx.defs.onnx_opset_version()}"
        )
    module = spec.module.eval()
    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings(), quiet_exporter():
        warnings.simplefilter("ignore")
        try:
            program = torch.onnx.export(
                module,
                example_inputs(spec),
                input_names=list(spec.inputs),
                output_names=list(spec.outputs),
                opset_version=cfg.opset,
                dynamo=True,
                optimize=True,
                verbose=False,
            )
        except Exception as exc:  # the exporter raises many types; the user needs the message
            raise export_failure(spec, exc) from exc
    facts = save_exported(program, path, cfg, lambda model: check_graph(model, spec))
    return facts | {"opset": cfg.opset, "exporter": "torch.export"}


def initializer_bytes(program: Any) -> int:
    """Bytes of an exported program's weights (its initializers), counted without serializing."""
    values = program.model.graph.initializers.values()
    return sum(int(v.const_value.nbytes) for v in values if v.const_value is not None)


def save_exported(
    program: Any, path: Path, cfg: ExportConfig, check: Callable[[Any], None], edit: Callable[[Any], None] | None = None
) -> dict[str, Any]:
    """Write the exporter's ``program`` to ``path``; facts for the manifest (``ops``,
    ``external_data``, ``side_files``: the weights file beside ``path`` under its final name).

    The weights go from torch's tensors straight to a side file, one tensor at a time (the
    exporter's ``model_proto`` would copy them all into memory, and protobuf cannot serialize
    2 GiB: a 2.25 GiB model failed in ``check_graph`` after 9.4 GB peak). The graph is then read
    without them, finished (``downgrade_split``, ``edit``) and checked (``check``: shape
    inference on the graph alone). Weights under the threshold (``_sidefiles.wants_external_data``)
    are folded back into the one ``.onnx``; over it, the side file gets its final name."""
    import onnx

    external = wants_external_data(initializer_bytes(program), cfg.external_data_mb)
    program.save(path, external_data=True)  # writes path and path.name + ".data"
    data = path.with_name(path.name + ".data")
    if data.is_file() and not external_data_locations(path):  # every tensor small enough to stay inside
        data.unlink()
    model = onnx.load(str(path), load_external_data=False)  # the graph; weights stay on disk
    downgrade_split(model)  # below opset 18 the exporter leaves Split(num_outputs): see export/opset.py
    check(model)
    if edit is not None:
        edit(model)
    side_files = []
    if not data.is_file():  # a model without weights
        onnx.save_model(model, str(path))
    else:
        side_files = [_name_external_data(model, data, path)]
    # Checked with the weights still beside it: the checker then reads the graph, not the weights.
    onnx.checker.check_model(str(path))
    if side_files and not external:  # under the threshold: one file
        onnx.load_external_data_for_model(model, str(path.parent))
        onnx.save_model(model, str(path))
        side_files[0].unlink()
        side_files = []
    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return {"ops": dict(sorted(ops.items())), "external_data": bool(side_files), "side_files": side_files}


def _name_external_data(model: Any, data: Path, path: Path) -> Path:
    """Rename the external-data file ``data`` to its final content-addressed name
    (``<stem>-<sha8>.onnx.data``, beside ``path``), point ``model``'s tensors (the graph, read
    without its weights) at that name and write it to ``path``, so the bundle can move both files
    in unchanged and hash both."""
    import onnx

    final = path.with_name(f"{path.stem}-{sha256_file(data)[:8]}.onnx.data")
    os.replace(data, final)
    tensors = [init for init in model.graph.initializer] + [
        a.t for node in model.graph.node for a in node.attribute if a.HasField("t")
    ]
    for tensor in tensors:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = final.name
    onnx.save_model(model, str(path))
    return final


def check_graph(model: Any, spec: ModelSpec) -> None:
    """Static dims, the spec's IO names/shapes, and no random or sampling ops."""
    from onnx import shape_inference

    found = sorted({n.op_type for n in model.graph.node} & RANDOM_OPS)
    if found:
        raise ExportError(
            f"the exported graph of {spec.name!r} contains {found}",
            hint="pass noise as a graph input (edgekit graphs take all randomness as inputs)",
        )
    inferred = shape_inference.infer_shapes(model, strict_mode=False)
    for role, values, expected in (
        ("input", inferred.graph.input, spec.inputs),
        ("output", inferred.graph.output, spec.outputs),
    ):
        names = [v.name for v in values]
        if names != list(expected):
            raise ExportError(f"exported {role}s {names} differ from the spec's {list(expected)}")
        for value in values:
            dims = value.type.tensor_type.shape.dim
            shape = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in dims)
            if shape != expected[value.name].shape:
                spec_shape = list(expected[value.name].shape)
                raise ExportError(
                    f"exported {role} {value.name!r} has shape {list(shape)}, the spec says {spec_shape}",
                    hint="make the module's output shapes static (no mode flags that change them)",
                )
