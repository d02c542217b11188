"""The names OpenVINO gives the ops it makes from ONNX nodes, asked of OpenVINO itself: NNCF's
ignored scope on an OpenVINO model matches these, not the ONNX node names. ``openvino`` is
imported lazily.

Measured on OpenVINO 2026.4 reading a torch.onnx (dynamo) export: an op keeps its ONNX node's name
(``node_MatMul_2``); a node OpenVINO splits keeps the name on its last op and gives the others
``<name>/<suffix>`` (Conv with a bias: ``node_conv1d/WithoutBiases`` + the Add ``node_conv1d``);
the op that makes a graph output is named after the output (``logits``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit._deps import require


def openvino_names(fp32_path: Path, graph: Any, nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the OpenVINO op names made from ONNX ``nodes`` of ``graph``, in OpenVINO's op order; the
    nodes none was found for). ``graph``: the ``onnx.GraphProto`` of ``fp32_path``."""
    ov = require("openvino")
    model = ov.Core().read_model(str(fp32_path))
    made = [op.get_friendly_name() for op in model.get_ordered_ops()]
    outputs = {o.name for o in graph.output}
    wanted: dict[str, str] = {}  # OpenVINO name -> the ONNX node it came from
    for node in graph.node:
        if node.name in nodes:
            wanted[node.name] = node.name
            for o in node.output:
                if o in outputs:
                    wanted[o] = node.name
    found, named = [], set()
    for name in made:
        source = wanted.get(name) or next((n for n in nodes if name.startswith(n + "/")), None)
        if source is not None and name not in found:
            found.append(name)
            named.add(source)
    return found, [n for n in nodes if n not in named]


__all__ = ["openvino_names"]
