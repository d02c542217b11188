"""edgekit._sidefiles: the one rule for when a model's weights go to a side file, and the files
an ONNX model reads beside itself."""

import numpy as np
import pytest

from edgekit._sidefiles import (
    DEFAULT_EXTERNAL_DATA_MB,
    external_data_locations,
    external_data_threshold,
    model_bytes,
    place_side_files,
    wants_external_data,
)
from edgekit.errors import UsageError

onnx = pytest.importorskip("onnx")


def test_the_threshold_comes_from_the_argument_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv("EDGEKIT_EXTERNAL_DATA_MB", raising=False)
    assert external_data_threshold() == DEFAULT_EXTERNAL_DATA_MB << 20 == 64 << 20
    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", "0.5")
    assert external_data_threshold() == 512 << 10
    assert external_data_threshold(2) == 2 << 20  # an ExportConfig's own value wins
    assert wants_external_data((512 << 10) + 1) and not wants_external_data(512 << 10)
    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", "0")
    assert wants_external_data(1) and not wants_external_data(0)


@pytest.mark.parametrize("raw", ["lots", "-1", "nan", "inf", "4096"])
def test_a_bad_threshold_is_one_line_naming_the_knob(monkeypatch, raw):
    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", raw)
    with pytest.raises(UsageError, match=rf"EDGEKIT_EXTERNAL_DATA_MB='{raw}' is not a number of MiB in \[0, 1792\]"):
        external_data_threshold()


def _context_model(path, cache: bytes, embed: int):
    node = onnx.helper.make_node(
        "EPContext", ["x"], ["y"], domain="com.microsoft", ep_cache_context=cache, embed_mode=embed
    )
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    onnx.save(onnx.helper.make_model(graph), str(path))
    return path


def test_a_context_binary_beside_an_epcontext_model_is_a_file_it_reads(tmp_path):
    assert external_data_locations(_context_model(tmp_path / "a.onnx", b"ctx-0123abcd.bin", 0)) == {"ctx-0123abcd.bin"}
    embedded = bytes(range(256)) * 4  # a binary is no file name
    assert external_data_locations(_context_model(tmp_path / "b.onnx", embedded, 1)) == set()


def test_weights_beside_a_model_are_found_weighed_and_linked(tmp_path):
    w = onnx.numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["w"], ["y"])],
        "g",
        [],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4096])],
        initializer=[w],
    )
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(onnx.helper.make_model(graph), str(src / "m.onnx"), save_as_external_data=True, location="m-w.data")
    assert external_data_locations(src / "m.onnx") == {"m-w.data"}
    assert model_bytes(src / "m.onnx") == (src / "m.onnx").stat().st_size + 4096 * 4
    dest = tmp_path / "dest"
    dest.mkdir()
    place_side_files(src / "m.onnx", dest)
    assert (dest / "m-w.data").stat().st_ino == (src / "m-w.data").stat().st_ino  # linked, not copied
