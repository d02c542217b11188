"""One weights file for every step bucket's graph: the initializers every bucket holds byte for
byte (the INT8 weights) are written once, and each graph names them as ONNX external data. What
the bundle stores (``record.stage_buckets``) and what a candidate's memory is measured on
(``shared_copies``)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit._deps import require

# Initializers smaller than this stay inside each bucket graph (a scalar scale, a zero point).
SHARED_MIN_BYTES = 256


def share_weights(models: Sequence[Any], onnx: Any) -> tuple[str, bytes]:
    """Point the initializers every one of ``models`` holds byte for byte at one external weights
    file (the models are changed in place); (that file's name, its bytes)."""
    shared = _shared_initializers(models, onnx)
    blob, places = bytearray(), {}
    for name, data in shared.items():
        blob += b"\0" * (-len(blob) % 64)  # aligned: runtimes may map the file
        places[name] = (len(blob), len(data))
        blob += data
    weights_name = f"int8-weights-{hashlib.sha256(bytes(blob)).hexdigest()[:8]}.bin"
    for model in models:
        for init in model.graph.initializer:
            if init.name in places:
                offset, length = places[init.name]
                onnx.external_data_helper.set_external_data(init, weights_name, offset, length)
                init.data_location = onnx.TensorProto.EXTERNAL
                init.ClearField("raw_data")
    return weights_name, bytes(blob)


def shared_copies(paths: Sequence[Path], folder: Path) -> list[Path]:
    """The graphs at ``paths`` written into ``folder`` over one weights file, as a bundle stores
    step buckets (what a candidate's memory is measured on)."""
    onnx = require("onnx")
    models = [onnx.load(str(p)) for p in paths]
    weights_name, blob = share_weights(models, onnx)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / weights_name).write_bytes(blob)
    out = []
    for i, model in enumerate(models):
        out.append(folder / f"bucket-{i}.onnx")
        onnx.save(model, str(out[-1]))
    return out


def _shared_initializers(models: Sequence[Any], onnx: Any) -> dict[str, bytes]:
    """{name: raw bytes} of the initializers every model holds with identical bytes (>= SHARED_MIN_BYTES)."""
    first = {i.name: i for i in models[0].graph.initializer}
    others = [{i.name: i for i in m.graph.initializer} for m in models[1:]]
    out = {}
    for name, init in first.items():
        data = onnx.numpy_helper.to_array(init).tobytes()
        if len(data) < SHARED_MIN_BYTES or not init.HasField("raw_data"):
            continue
        if all(
            name in o
            and o[name].data_type == init.data_type
            and list(o[name].dims) == list(init.dims)
            and onnx.numpy_helper.to_array(o[name]).tobytes() == data
            for o in others
        ):
            out[name] = data
    return out
