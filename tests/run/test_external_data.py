"""`edgekit run` of a model whose weights live in a side file (issue #42, item 2), on ONNX Runtime
and OpenVINO under protobuf's limit scaled down to the masked demo (tests/external_data.py): the
decode equals the embedded twin's, and the runtime names every file it loaded."""

import numpy as np
import pytest

from edgekit.bundle import Bundle
from tests.external_data import decode, scaled_limit


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
def test_decodes_what_the_embedded_twin_decodes(external_bundles, tmp_path, runtime):
    pytest.importorskip("openvino" if runtime == "openvino" else "onnxruntime")
    got = decode(external_bundles["external"], tmp_path / "ext.npz", "--runtime", runtime)
    want = decode(external_bundles["embedded"], tmp_path / "emb.npz", "--runtime", runtime, limited=False)
    assert got.keys() == want.keys() and "tokens" in want
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
def test_the_runtime_names_the_side_file_it_loaded(external_bundles, runtime):
    pytest.importorskip("openvino" if runtime == "openvino" else "onnxruntime")
    from edgekit.runtimes import open_runtime

    bundle = Bundle.load(external_bundles["external"])
    (side,) = bundle.manifest["artifacts"]["fp32"]["side_files"]
    with scaled_limit(), open_runtime(bundle, runtime, "fp32") as rt:
        assert [p.name for p in rt.model_files] == [bundle.path_of("fp32").name, side["path"]]
