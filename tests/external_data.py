"""A demo model through the code paths of one over protobuf's 2 GB limit (issue #42, item 2).

The suite cannot hold 2 GB, so ``protobuf_limit`` scales the limit down to the demo models:
every model edgekit writes keeps its weights in a side file (``EDGEKIT_EXTERNAL_DATA_MB=0``), and
serializing an ``onnx.ModelProto`` whose tensors in memory hold more than ``LIMIT`` bytes raises
what protobuf raises at 2 GiB (``EncodeError: Failed to serialize proto``). A stage that
serializes a whole model in memory (``SerializeToString``, ``infer_shapes(model)``,
``check_model(model)``, ``InferenceSession(model.SerializeToString())``, ``onnx.save`` without
external data) then fails here as it fails at size, instead of passing because the model is
small. Files ONNX Runtime or OpenVINO write from C++ are checked by what they hold instead
(``assert_weights_outside``).

The fixtures are registered in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest

# The masked demo's weights are 3.3 MB, 14 kB of them in tensors under 1 KiB (which stay inside
# the .onnx with external data): a graph without its weights serializes, the whole model does not.
LIMIT = 256 << 10


def inline_tensor_bytes(model) -> int:
    """Bytes of tensor data a ModelProto holds in memory (initializers, tensor attributes, subgraphs)."""

    def tensor(t) -> int:
        return (
            len(t.raw_data)
            + 4 * (len(t.float_data) + len(t.int32_data))
            + 8 * (len(t.int64_data) + len(t.double_data) + len(t.uint64_data))
            + sum(len(s) for s in t.string_data)
        )

    def graph(g) -> int:
        n = sum(tensor(t) for t in g.initializer) + sum(tensor(s.values) for s in g.sparse_initializer)
        for node in g.node:
            for a in node.attribute:
                n += (tensor(a.t) if a.HasField("t") else 0) + sum(tensor(t) for t in a.tensors)
                n += (graph(a.g) if a.HasField("g") else 0) + sum(graph(s) for s in a.graphs)
        return n

    return graph(model.graph) + sum(
        tensor(a.t) for f in model.functions for node in f.node for a in node.attribute if a.HasField("t")
    )


@contextmanager
def scaled_limit() -> Iterator[int]:
    """Every model written with external data, and protobuf's 2 GiB limit at ``LIMIT`` bytes."""
    onnx = pytest.importorskip("onnx")
    from google.protobuf.message import EncodeError

    cls = onnx.ModelProto
    originals = {name: getattr(cls, name) for name in ("SerializeToString", "SerializePartialToString", "ByteSize")}

    def guarded(name):
        original = originals[name]

        def method(self, *args, **kwargs):
            held = inline_tensor_bytes(self)
            if held > LIMIT:
                raise EncodeError(
                    f"Failed to serialize proto (test limit: {held} bytes of tensors in memory > {LIMIT}; "
                    f"a model over 2 GB fails here)"
                )
            return original(self, *args, **kwargs)

        return method

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEKIT_EXTERNAL_DATA_MB", "0")
        for name in originals:
            mp.setattr(cls, name, guarded(name))
        yield LIMIT


@pytest.fixture
def protobuf_limit() -> Iterator[int]:
    """``scaled_limit`` for one test."""
    with scaled_limit() as limit:
        yield limit


def assert_weights_outside(model_path: Path) -> set[str]:
    """``model_path`` (an ONNX file written by a C++ library) keeps its weights in side files
    beside it, as a 2 GB model must: the .onnx holds at most ``LIMIT`` bytes of tensors, and every
    file it reads exists. Returns the side files' names."""
    import onnx

    from edgekit._sidefiles import external_data_locations

    sides = external_data_locations(model_path)
    held = inline_tensor_bytes(onnx.load(str(model_path), load_external_data=False))
    assert sides and held <= LIMIT, f"{model_path.name} holds {held} bytes of tensors inline, side files {sides}"
    for name in sides:
        assert (model_path.parent / name).is_file(), f"{model_path.name} reads {name}, which is not beside it"
    return sides


@pytest.fixture(scope="session")
def external_bundles(tmp_path_factory) -> dict[str, Path]:
    """The masked demo (batch 2) exported twice: ``external`` under ``scaled_limit`` (weights in a
    side file, no model serialized whole), ``embedded`` with the default rule (one file): the
    twin whose results the external one must equal. Tests that write into one copy it first."""
    pytest.importorskip("torch")
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    root = tmp_path_factory.mktemp("external-data")
    out = {"embedded": export_bundle(load_spec("masked-demo", batch=2), root / "embedded", source="masked-demo").root}
    with scaled_limit():
        out["external"] = export_bundle(load_spec("masked-demo", batch=2), root / "external", source="masked-demo").root
    return out


def decode(bundle: Path, out: Path, *args: str, limited: bool = True) -> dict:
    """``edgekit run BUNDLE *args -o out.npz`` (one batch, fixed seed), under ``scaled_limit``
    when ``limited`` (the embedded twin is not: its weights are inside the file by the rule); the
    arrays it wrote."""
    import numpy as np
    from typer.testing import CliRunner

    from edgekit.cli import app

    with scaled_limit() if limited else nullcontext():
        r = CliRunner().invoke(
            app, ["run", str(bundle), "--cond", "class_id=1", "--seed", "3", "--steps", "4", *args, "-o", str(out)]
        )
    assert r.exit_code == 0, r.output
    with np.load(out) as data:
        return {k: data[k] for k in data.files}
