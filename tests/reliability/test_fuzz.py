"""Property-based fuzzing of the parsers a user's files reach: the manifest and ONNX loading.
Whatever the bytes, the result is a clean EdgekitError (one line), never another exception."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgekit.bundle import MANIFEST, SCHEMA, Bundle
from edgekit.errors import EdgekitError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)


@FUZZ
@given(doc=json_values)
def test_any_json_manifest_is_a_clean_error_or_loads(tmp_path, doc):
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    try:
        Bundle.load(tmp_path)
    except EdgekitError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(artifacts=st.dictionaries(st.text(max_size=6), json_values, max_size=3), io=json_values, model=json_values)
def test_schema_valid_manifest_with_garbage_sections(tmp_path, artifacts, io, model):
    doc = {"schema": SCHEMA, "model": model, "io": io, "artifacts": artifacts}
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    try:
        b = Bundle.load(tmp_path)
    except EdgekitError:
        return
    assert b.manifest["artifacts"] == artifacts
    assert b.kind and b.inputs and b.outputs  # what every command reads works


@FUZZ
@given(data=st.binary(max_size=512))
def test_onnx_loading_of_arbitrary_bytes_is_a_clean_error(tmp_path, data):
    from edgekit.runtimes.ort import OrtRuntime

    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    with pytest.raises(EdgekitError) as info:
        OrtRuntime(path)
    assert str(path) in str(info.value)


def test_truncated_real_model_is_a_clean_error(demo_bundles, tmp_path):
    from edgekit.runtimes.ort import OrtRuntime

    src = Bundle.load(demo_bundles["masked"]).path_of("fp32").read_bytes()
    for cut in (10, len(src) // 2, len(src) - 7):
        path = tmp_path / f"cut{cut}.onnx"
        path.write_bytes(src[:cut])
        with pytest.raises(EdgekitError):
            OrtRuntime(path)
