"""Reading an ONNX file as one clean error: a missing, empty or corrupt file (even one whose
recorded hash was updated after it was corrupted, so it passes the bundle's check) must not reach
protobuf as a traceback. The one ``load_onnx`` every room uses; ``onnx`` is imported lazily."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._sidefiles import (
    INLINE_TENSOR_BYTES,
    PROTOBUF_LIMIT,
    external_data_locations,
    model_bytes,
    wants_external_data,
)
from edgekit.bundle import sha256_file
from edgekit.errors import BundleError


def load_onnx(path: str | Path, what: str | None = None, *, external_data: bool = False) -> Any:
    """``onnx.ModelProto`` of ``path`` (weights in external files loaded only with
    ``external_data``), or one error naming it: ``what`` (e.g. "artifact 'fp32'") and the path."""
    onnx = require("onnx")
    path = Path(path)
    name = f"{what} ({path})" if what else f"ONNX model {path}"
    fix = "re-run the stage that made it (re-export for fp32)" if what else "re-export it (edgekit export)"
    if not path.is_file():
        raise BundleError(f"{name} does not exist", hint="check the path, or run edgekit export")
    if path.stat().st_size == 0:
        raise BundleError(f"{name} is empty (0 bytes)", hint=fix)
    try:
        model = onnx.load(str(path), load_external_data=external_data)
    except Exception as exc:  # noqa: BLE001 - DecodeError, ValueError, OSError: the same user-facing fault
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise BundleError(f"{name} is not a readable ONNX model ({type(exc).__name__}: {first})", hint=fix) from None
    if not model.graph.node and not model.graph.output:
        raise BundleError(f"{name} is not a readable ONNX model (no graph)", hint=fix)
    return model


def weight_bytes(model: Any) -> int:
    """Bytes of ``model``'s initializers as it holds them (in memory, or in its side file)."""
    total = 0
    for tensor in model.graph.initializer:
        if tensor.HasField("raw_data"):
            total += len(tensor.raw_data)
        else:
            length = next((int(e.value) for e in tensor.external_data if e.key == "length"), None)
            total += length if length is not None else tensor.ByteSize()
    return total


def needs_side_file(path: str | Path) -> bool:
    """Whether a model derived from the one at ``path`` is written with its weights in a side
    file: where it has one already, or its weights are over the threshold
    (``_sidefiles.wants_external_data``)."""
    path = Path(path)
    return bool(external_data_locations(path)) or wants_external_data(model_bytes(path))


def save_onnx(model: Any, path: str | Path, external: bool | None = None) -> Path:
    """Write ``model`` to ``path``; its weights to one side file beside it (``<name>.data``) when
    ``external`` (None: when they are over the threshold, ``_sidefiles.wants_external_data``;
    always over protobuf's 2 GiB, which cannot serialize them inline). A model read without its
    weights keeps pointing at its side file: write it where that file is."""
    onnx = require("onnx")

    path = Path(path)
    size = weight_bytes(model)
    loaded = all(not t.external_data for t in model.graph.initializer)
    if external is None:
        external = size >= PROTOBUF_LIMIT or wants_external_data(size)
    if external and loaded:
        data = path.with_name(path.name + ".data")
        data.unlink(missing_ok=True)  # onnx appends to an existing one
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data.name,
            size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(path))
    return path


def finalize_side_file(path: Path) -> list[Path]:
    """Give the one side file the ONNX model at ``path`` reads its content-addressed name
    (``<stem>-<sha8>.onnx.data``, beside it) and point the graph at it, so a bundle can move
    both in and hash both; [] for a model without one."""
    onnx = require("onnx")

    names = sorted(external_data_locations(path))
    if not names:
        return []
    if len(names) > 1:
        raise ValueError(f"{path.name} reads weights from {len(names)} files; edgekit writes one")
    data = path.parent / names[0]
    final = path.with_name(f"{path.stem}-{sha256_file(data)[:8]}.onnx.data")
    os.replace(data, final)
    model = onnx.load(str(path), load_external_data=False)
    for tensor in [*model.graph.initializer, *(a.t for n in model.graph.node for a in n.attribute if a.HasField("t"))]:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = final.name
    onnx.save_model(model, str(path))
    return [final]


# Bytes copied at a time when weights move from one side file to another.
COPY_CHUNK = 16 << 20


def save_with_one_side_file(src: Path, dest: Path) -> Path:
    """Write the ONNX model at ``src`` at ``dest`` with its weights in one side file beside it
    (``<dest name>.data``), however many files ``src`` reads them from (a derived quantize
    candidate: the all-INT8 graph's and the prepared model's): the graph is read alone and each
    tensor's bytes are copied from its file, so memory holds the graph and one chunk, never the
    weights. Tensors ``src`` holds inline move out too from ``INLINE_TENSOR_BYTES`` up, as
    ``save_onnx`` would write them."""
    onnx = require("onnx")
    src, dest = Path(src), Path(dest)
    model = onnx.load(str(src), load_external_data=False)
    data = dest.with_name(dest.name + ".data")
    data.unlink(missing_ok=True)
    with open(data, "wb") as sink:
        for tensor in _tensors(model.graph):
            offset = sink.tell()
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                where = {e.key: e.value for e in tensor.external_data}
                length = where.get("length")
                _copy_bytes(src.parent / where["location"], int(where.get("offset") or 0), length, sink)
            elif tensor.HasField("raw_data") and len(tensor.raw_data) >= INLINE_TENSOR_BYTES:
                sink.write(tensor.raw_data)
                tensor.ClearField("raw_data")
            else:
                continue
            # onnx's set_external_data wants the bytes in memory (raw_data): the entries written here
            del tensor.external_data[:]
            for key, value in (("location", data.name), ("offset", offset), ("length", sink.tell() - offset)):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            tensor.data_location = onnx.TensorProto.EXTERNAL
    onnx.save_model(model, str(dest))
    return dest


def _tensors(graph: Any) -> list[Any]:
    """Every tensor of ``graph`` that can hold weights: initializers and node attributes (a
    Constant's value), subgraphs included."""
    out = list(graph.initializer)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                out.append(attr.t)
            out.extend(attr.tensors)
            if attr.HasField("g"):
                out.extend(_tensors(attr.g))
            for sub in attr.graphs:
                out.extend(_tensors(sub))
    return out


def _copy_bytes(path: Path, offset: int, length: str | None, sink: Any) -> None:
    """Copy ``length`` bytes of ``path`` from ``offset`` (None: to its end) to ``sink``, a chunk at a time."""
    left = None if length is None else int(length)
    with open(path, "rb") as source:
        source.seek(offset)
        while left is None or left > 0:
            chunk = source.read(COPY_CHUNK if left is None else min(COPY_CHUNK, left))
            if not chunk:
                if left:
                    raise BundleError(f"{path.name} ends {left} bytes before a tensor it should hold")
                return
            sink.write(chunk)
            if left is not None:
                left -= len(chunk)
