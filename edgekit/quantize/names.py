"""Which names other tools know a quantized node by: the FP32 (exported) graph's node names and
the torch module it came from.

Quantize works on a *prepared* graph: ``quant_pre_process`` (or the qnn preprocessing) fuses and
renames nodes (a Linear's MatMul + Add becomes ``node_MatMul_2/MatMulAddFusion``, a Gemm
``<name>_matmul`` + ``<name>_bias``), names that neither the FP32 graph, the torch module, NNCF's
ignored scope nor OpenVINO know. ``trace_origins`` maps each prepared node back to the FP32
node(s) it came from, most reliable evidence first:

1. a node of the same name;
2. the FP32 node that alone read one of its constant inputs (a MatMul/Gemm/Conv keeps its weight
   and bias tensors through fusion; a constant several nodes share says nothing);
3. the FP32 node that produced one of its outputs (a tensor name that survived);
4. the longest FP32 node name its own name starts with, up to a ``/`` or ``_`` (fusion suffixes).

``module_labels`` reads the torch module of each FP32 node: the exporter's name-scope metadata
(``torch.onnx`` dynamo: ``pkg.torch.onnx.name_scopes``), else a TorchScript-style node name
(``/encoder/layers.0/attn/q_proj/MatMul`` -> ``encoder.layers.0.attn.q_proj``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.runtimes.onnx_file import load_onnx

_NAME_SCOPES = "pkg.torch.onnx.name_scopes"  # torch.onnx (dynamo) node metadata: module path


@dataclass(frozen=True)
class Lineage:
    """Where each node of a prepared graph came from. ``origins``: prepared node -> the FP32 nodes
    (graph order; empty where nothing says); ``modules``: FP32 node -> torch module path."""

    origins: Mapping[str, tuple[str, ...]]
    modules: Mapping[str, str]

    @classmethod
    def read(cls, fp32_path: Path, prepared_path: Path) -> Lineage:
        fp32 = load_onnx(fp32_path, "artifact 'fp32'").graph  # names only: no weights read
        prepared = load_onnx(prepared_path, "the prepared float graph").graph
        return cls(trace_origins(fp32, prepared), labels_of(fp32))

    def origin(self, node: str) -> tuple[str, ...]:
        return tuple(self.origins.get(node, ()))

    def module(self, node: str) -> str | None:
        """The torch module of prepared ``node``: that of the first FP32 node it came from that has one."""
        return next((self.modules[o] for o in self.origin(node) if o in self.modules), None)


def trace_origins(fp32: Any, prepared: Any) -> dict[str, tuple[str, ...]]:
    """prepared node name -> FP32 node names it came from (the rules in the module docstring);
    ``fp32`` and ``prepared`` are ``onnx.GraphProto``."""
    order = {n.name: i for i, n in enumerate(fp32.node) if n.name}
    constants = {i.name for i in fp32.initializer} | {o for n in fp32.node if n.op_type == "Constant" for o in n.output}
    readers: dict[str, set[str]] = defaultdict(set)
    producer: dict[str, str] = {}
    for node in fp32.node:
        for i in node.input:
            if i in constants:
                readers[i].add(node.name)
        for o in node.output:
            producer[o] = node.name
    out = {}
    for node in prepared.node:
        found = {node.name} if node.name in order else set()
        for i in node.input:
            if len(readers.get(i, ())) == 1:
                found |= readers[i]
        if not found:
            found = {producer[o] for o in node.output if o in producer}
        if not found:
            head = _longest_prefix(node.name, order)
            found = {head} if head else set()
        out[node.name] = tuple(sorted((f for f in found if f in order), key=order.__getitem__))
    return out


def _longest_prefix(name: str, known: Mapping[str, int]) -> str | None:
    for cut in range(len(name) - 1, 0, -1):
        if name[cut] in "/_" and name[:cut] in known:
            return name[:cut]
    return None


def module_labels(fp32_path: Path) -> dict[str, str]:
    """FP32 node name -> torch module path (``labels_of`` the bundle's fp32 graph)."""
    return labels_of(load_onnx(fp32_path, "artifact 'fp32'").graph)


def labels_of(graph: Any) -> dict[str, str]:
    """Node name -> module path, from the exporter's name-scope metadata, else a TorchScript-style
    node name. ``quant_pre_process`` drops the metadata: read it from the FP32 graph."""
    labels = {}
    for node in graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        modules = [s for s in _parse_scopes(meta.get(_NAME_SCOPES, ""))[:-1] if s]  # the last entry names the op
        module = modules[-1] if modules else torchscript_module(node.name)
        if module:
            labels[node.name] = module
    return labels


def torchscript_module(name: str) -> str | None:
    """``/encoder/layers.0/attn/q_proj/MatMul`` -> ``encoder.layers.0.attn.q_proj`` (the TorchScript
    exporter's node names: the module path in ``/`` scopes, then the op); None for other names."""
    if not name.startswith("/"):
        return None
    scopes = [s for s in name[1:].split("/")[:-1] if s]
    return ".".join(scopes) or None


def _parse_scopes(text: str) -> list[str]:
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return []
    return [p.strip().strip("'\"") for p in text[1:-1].split(",")]


__all__ = ["Lineage", "labels_of", "module_labels", "torchscript_module", "trace_origins"]
