"""Property-based fuzzing of the target TOML parser: any document is a Target or one clean error."""

from hypothesis import given, settings
from hypothesis import strategies as st

from edgekit.errors import EdgekitError
from edgekit.targets import builtin_names, load_target, parse_target

keys = st.sampled_from(
    ["name", "runtimes", "precisions", "quantization", "power", "arch", "ort", "trt", "lint", "bogus", "providers"]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5000)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


values = scalars.filter(lambda v: v is not None) | st.lists(scalars.filter(lambda v: v is not None), max_size=3)


@settings(max_examples=200, deadline=None, database=None)
@given(
    doc=st.dictionaries(keys, values, max_size=6),
    table=st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=8), values, max_size=3),
)
def test_any_target_document_is_a_target_or_one_clean_error(doc, table):
    text = (
        "\n".join(f"{k} = {_toml_value(v)}" for k, v in doc.items())
        + "\n[ort]\n"
        + "\n".join(f"{k} = {_toml_value(v)}" for k, v in table.items())
    )
    try:
        target = parse_target(text, "fuzz.toml")
    except EdgekitError as exc:
        assert "\n" not in str(exc)
    else:
        assert target.runtimes


@settings(max_examples=100, deadline=None, database=None)
@given(text=st.text(max_size=200))
def test_arbitrary_text_is_a_clean_error_or_a_target(text):
    try:
        parse_target(text, "fuzz.toml")
    except EdgekitError as exc:
        assert "\n" not in str(exc)


def test_every_builtin_target_loads_and_round_trips_names():
    for name in builtin_names():
        assert load_target(name).name == name
