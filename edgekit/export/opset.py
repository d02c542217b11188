"""Finishing a graph exported below the exporter's native opset 18.

TensorRT 8.5/8.6 (JetPack 5 and 6.0) parse opsets up to 17, so those targets need
``edgekit export --opset 17``. The torch.export-based exporter builds opset 18 and converts down,
but leaves ``Split`` with opset 18's ``num_outputs`` attribute in an opset-17 model (invalid: the
checker and every parser reject it), and ``onnx.version_converter`` has no Split 18 -> 17
adapter. Opset 13-17 ``Split`` takes the chunk sizes as a second input instead: with static
shapes they are known at export, so this pass writes them as an initializer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgekit.errors import ExportError


def default_opset(model: Any) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def split_sizes(dim: int, parts: int) -> list[int]:
    """Opset 18 ``Split(num_outputs=parts)`` of ``dim``: chunks of ceil(dim / parts), the last one
    smaller when ``dim`` does not divide evenly."""
    chunk = math.ceil(dim / parts)
    sizes = [chunk] * (parts - 1)
    return [*sizes, dim - chunk * (parts - 1)]


def downgrade_split(model: Any) -> int:
    """Rewrite every ``Split`` with a ``num_outputs`` attribute in a model whose default-domain
    opset is below 18 into the opset 13-17 form (sizes as an int64 initializer input), in place;
    returns how many nodes were rewritten. Needs the split input's static shape."""
    from onnx import helper, numpy_helper, shape_inference

    opset = default_opset(model)
    if opset is None or opset >= 18:
        return 0
    targets = [
        n
        for n in model.graph.node
        if n.op_type == "Split" and n.domain in ("", "ai.onnx") and any(a.name == "num_outputs" for a in n.attribute)
    ]
    if not targets:
        return 0
    inferred = shape_inference.infer_shapes(model, strict_mode=False)
    shapes = {
        v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
        for v in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output)
    }
    shapes.update({i.name: list(i.dims) for i in model.graph.initializer})
    for index, node in enumerate(targets):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        shape = shapes.get(node.input[0])
        axis = attrs.get("axis", 0)
        dim = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else None
        if dim is None:
            raise ExportError(
                f"cannot write Split node {node.name!r} for opset {opset}: its input {node.input[0]!r} has no static "
                f"size on axis {axis}",
                hint="export with the default --opset 18",
            )
        name = f"{node.name or 'split'}_sizes_{index}"
        sizes = np.array(split_sizes(int(dim), int(attrs["num_outputs"])), dtype=np.int64)
        model.graph.initializer.append(numpy_helper.from_array(sizes, name))
        kept = [a for a in node.attribute if a.name != "num_outputs"]
        del node.attribute[:]
        node.attribute.extend(kept)
        del node.input[1:]
        node.input.append(name)
    return len(targets)
