"""TensorSpec maps from an ONNX graph's inputs and outputs (shared by the ORT and TensorRT backends;
reading the file is ``runtimes.onnx_file.load_onnx``).

edgekit runs static shapes only: a symbolic or unknown dimension is one clear error that names
every offending tensor and the command that fixes the dims. ``onnx`` is imported lazily.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError
from edgekit.spec import DTYPES, TensorSpec

# onnx.TensorProto element types edgekit can feed (numbers, so this module needs no onnx import).
ONNX_ELEM_DTYPES: dict[int, str] = {1: "float32", 10: "float16", 7: "int64", 6: "int32", 9: "bool"}
# onnxruntime NodeArg.type strings.
ORT_TYPE_DTYPES: dict[str, str] = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(bool)": "bool",
}

# One IO entry: (role "input"/"output", name, dims as the graph states them, dtype name). A dtype
# edgekit cannot feed keeps the backend's own name (e.g. "tensor(double)") for the error message.
IoEntry = tuple[str, str, Sequence[Any], str]


def specs_from_entries(
    entries: Iterable[IoEntry], source: str | Path
) -> tuple[dict[str, TensorSpec], dict[str, TensorSpec]]:
    """Build ``(inputs, outputs)`` or raise one error listing every dynamic dim and bad dtype.

    A dim counts as static when it is a positive int; a ``str`` is a symbolic ``dim_param``,
    ``None``/0/negative an unknown one."""
    inputs: dict[str, TensorSpec] = {}
    outputs: dict[str, TensorSpec] = {}
    dynamic: list[str] = []
    dim_params: list[str] = []
    bad_dtype: list[str] = []
    for role, name, dims, dtype in entries:
        static = all(isinstance(d, int) and d > 0 for d in dims)
        if not static:
            shown = [d if isinstance(d, (int, str)) else "?" for d in dims]
            dynamic.append(f"{role} {name!r} {shown}")
            dim_params += [d for d in dims if isinstance(d, str) and d not in dim_params]
        if dtype not in DTYPES:
            bad_dtype.append(f"{role} {name!r} is {dtype}")
        if static and dtype in DTYPES:
            (inputs if role == "input" else outputs)[name] = TensorSpec(tuple(int(d) for d in dims), dtype)
    if dynamic:
        fix = " ".join(f"--dim_param {p} --dim_value N" for p in dim_params)
        fix = fix or "--input_name NAME --input_shape D0,D1,..."
        raise EdgekitError(
            f"{source}: edgekit runs static shapes only, and these tensors have dynamic dims: {'; '.join(dynamic)}",
            hint=(
                "export with static shapes (edgekit export does), or fix the dims: "
                f"python -m onnxruntime.tools.make_dynamic_shape_fixed {fix} in.onnx out.onnx"
            ),
        )
    if bad_dtype:
        raise EdgekitError(
            f"{source}: unsupported IO dtypes: {'; '.join(bad_dtype)}; valid: {', '.join(DTYPES)}",
            hint="cast the graph inputs/outputs at export",
        )
    return inputs, outputs


def onnx_graph_specs(model: Any, source: str | Path) -> tuple[dict[str, TensorSpec], dict[str, TensorSpec]]:
    """``(inputs, outputs)`` from an ``onnx.ModelProto``'s graph IO (initializers listed as graph
    inputs by old exporters are not inputs)."""
    initializers = {init.name for init in model.graph.initializer}

    def entries(values: Iterable[Any], role: str) -> Iterable[IoEntry]:
        for value in values:
            if role == "input" and value.name in initializers:
                continue
            tensor = value.type.tensor_type
            dims: list[Any] = []
            if tensor.HasField("shape"):
                for dim in tensor.shape.dim:
                    kind = dim.WhichOneof("value")
                    # int, a symbolic name, or None for an unnamed unknown dim
                    dims.append({"dim_value": dim.dim_value, "dim_param": dim.dim_param}.get(kind))
            else:
                dims = [None]  # rank unknown
            yield role, value.name, dims, ONNX_ELEM_DTYPES.get(tensor.elem_type, f"onnx elem_type {tensor.elem_type}")

    return specs_from_entries([*entries(model.graph.input, "input"), *entries(model.graph.output, "output")], source)


def ort_session_specs(session: Any, source: str | Path) -> tuple[dict[str, TensorSpec], dict[str, TensorSpec]]:
    """``(inputs, outputs)`` from an ``onnxruntime.InferenceSession`` (its NodeArgs)."""

    def entries(args: Iterable[Any], role: str) -> Iterable[IoEntry]:
        for arg in args:
            dims = arg.shape if arg.shape is not None else [None]
            yield role, arg.name, list(dims), ORT_TYPE_DTYPES.get(arg.type, arg.type)

    return specs_from_entries(
        [*entries(session.get_inputs(), "input"), *entries(session.get_outputs(), "output")], source
    )
