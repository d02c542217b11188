"""The manifest's one schema under attack (issue #30, point 3): every field of a manifest that has
every section, given every wrong JSON type, is one clean line from ``Bundle.load`` — "manifest
<path> field X: expected <type>, found <value>" — and from the CLI (inspect, run): exit 1, no
traceback. Fields a newer edgekit adds are ignored, never a crash."""

import copy
import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edgekit.bundle import MANIFEST, Bundle, QuantizationSummary
from edgekit.cli import app
from edgekit.errors import BundleError
from tests.reliability.test_cli_fuzz import LIMIT_S, time_limit

runner = CliRunner()
WRONG = [None, True, 7, 2.5, "x", [1], {"k": 1}]
RUN = ["--cond", "class_id=1"]


def _json_type(value):
    return type(value) if value is not None else type(None)


@pytest.fixture(scope="module")
def base(tiny_bundles, tmp_path_factory):
    """A tiny masked bundle whose manifest has every section a stage reads (engines, fused,
    quantization, flow quality, chunk geometry) beside the exported ones; returns (root, doc)."""
    root = shutil.copytree(tiny_bundles["masked"], tmp_path_factory.mktemp("schema") / "masked")
    doc = json.loads((root / MANIFEST).read_text())
    fp32 = doc["artifacts"]["fp32"]
    doc["quantization"] = {
        "profile": "cpu",
        "passed": True,
        "budget": {"eval": {"samples": 4, "seed": 0, "decode": {"steps": 4}}},
    }
    doc["engines"] = {
        "cpu/fp32": {
            "path": fp32["path"],
            "sha256": fp32["sha256"],
            "bytes": fp32["bytes"],
            "runtime": "ort",
            "runtime_version": "1.0",
            "format": "onnx",
            "device": "x86_64",
            "portable": True,
            "cpu_isa": ["avx2"],
            "target": "cpu",
            "precision": "fp32",
            "source": "fp32",
            "source_onnx_sha256": fp32["sha256"],
            "config": {"device": "CPU", "compiled": {"threads": 1}},
            "session_seconds": {"compile": 1.0, "load_precompiled": 0.1},
            "qnn": {"htp_arch": 73, "soc_model": 57},
        }
    }
    doc["fused"] = {
        "step": {
            "graph": "step",
            "artifact": "fp32",
            "path": fp32["path"],
            "mask_id": 16,
            "ops": {"Add": 1},
            "baked": {"steps": 6, "schedule": "cosine", "mask_counts": [12, 6, 0]},
        }
    }
    doc["flow_quality"] = {"table": [{"solver": "euler", "steps": 4, "nfe": 4, "snr_db": 20.0}]}
    doc["model"]["meta"]["chunk"] = {
        "frames": 4,
        "context": 0,
        "lookahead": 0,
        "tokens_input": "tokens",
        "sigma_min": 0.0,
    }
    (root / MANIFEST).write_text(json.dumps(doc))
    Bundle.load(root)  # the base itself is valid, and run works on it
    r = runner.invoke(app, ["run", str(root), *RUN])
    assert r.exit_code == 0, r.output
    return root, doc


def _fields(doc, where=()):
    """Every field path (object members, and the first item of each list) of ``doc``."""
    out = []
    items = doc.items() if isinstance(doc, dict) else list(enumerate(doc))[:1]
    for key, value in items:
        path = (*where, key)
        out.append(path)
        if isinstance(value, (dict, list)):
            out += _fields(value, path)
    return out


def _mutations(doc):
    """(path, wrong value) for every field and every JSON type it does not have."""
    return [
        (path, value)
        for path in _fields(doc)
        if path != ("schema",)
        for value in WRONG
        if _json_type(value) is not _json_type(_get(doc, path))
    ]


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _mutated(doc, path, value):
    out = copy.deepcopy(doc)
    _get(out, path[:-1])[path[-1]] = value
    return out


def _clean(r, *commands):
    """No traceback; exit 0, or exactly one `error:` line."""
    assert r.exception is None or isinstance(r.exception, SystemExit), (commands, r.exception)
    assert "Traceback" not in r.output, r.output
    if r.exit_code != 0:
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, r.stderr


def _reads_everything(b: Bundle) -> None:
    """What the stages read from a loaded bundle works on whatever the schema let through."""
    assert b.kind and b.name and b.inputs and b.outputs and b.batch >= 0
    assert all(isinstance(section, dict) for section in (b.decode_defaults, b.engines, b.fused, b.verification))
    assert b.quantization is None or isinstance(b.quantization, QuantizationSummary)
    assert b.flow_quality is None or isinstance(b.flow_quality, dict)
    assert all(text is None or isinstance(text, str) for text in (b.source, b.condition_sampler))
    for name in b.artifact_names:
        b.artifact(name)
    for name in b.conditioning:
        assert name in b.inputs


def test_every_field_with_every_wrong_type_is_one_clean_line(base, tmp_path):
    """Bundle.load over all of them (~950 cases, milliseconds each): a BundleError of one line
    naming the manifest, or a bundle whose every accessor works."""
    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    failures, rejected = [], 0
    for path, value in _mutations(doc):
        (work / MANIFEST).write_text(json.dumps(_mutated(doc, path, value)))
        try:
            _reads_everything(Bundle.load(work))
        except BundleError as exc:
            rejected += 1
            if "\n" in str(exc) or not str(exc).startswith("manifest "):
                failures.append(f"{path} = {value!r}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the point: name every field that escapes as another exception
            failures.append(f"{path} = {value!r}: {type(exc).__name__}: {exc}")
    assert failures == [], "\n".join(failures[:20])
    assert rejected > len(_mutations(doc)) // 2  # most wrong types are refused, not waved through


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)
@given(data=st.data())
def test_inspect_and_run_on_a_manifest_with_a_wrong_type_are_clean(base, tmp_path_factory, data):
    """The CLI over a sample of the same cases (a command costs ~0.1-0.5 s)."""
    root, doc = base
    path, value = data.draw(st.sampled_from(_mutations(doc)))
    work = tmp_path_factory.mktemp("cli") / "b"
    shutil.copytree(root, work)
    (work / MANIFEST).write_text(json.dumps(_mutated(doc, path, value)))
    for cmd in (["inspect"], ["run", *RUN]):
        with time_limit(LIMIT_S):
            r = runner.invoke(app, [cmd[0], str(work), *cmd[1:]])
        _clean(r, cmd, path, value)


@pytest.mark.parametrize(
    "path,value,field,expected",
    [
        (
            ("model", "meta", "conditioning"),
            [1, 2],
            "model.meta.conditioning",
            "expected null or an object, found list [1, 2]",
        ),
        (("model", "meta", "conditioning"), "class_id", "model.meta.conditioning", "found string 'class_id'"),
        (("model", "meta", "conditioning", "class_id"), 3, "model.meta.conditioning.class_id", "found integer 3"),
        (("quantization",), [], "quantization", "expected null or an object, found list []"),
        (("verification",), "ok", "verification", "found string 'ok'"),
        (("verification", "fp32"), 1, "verification.fp32", "expected an object, found integer 1"),
        (
            ("model", "ground_truth"),
            "imagenet",
            "model.ground_truth",
            "corpus-tokens, corpus-frames, found string 'imagenet'",
        ),
        (("engines", "cpu/fp32", "config"), ["CPU"], "engines['cpu/fp32'].config", "found list ['CPU']"),
        (
            ("quantization", "budget", "eval", "samples"),
            "4",
            "quantization.budget.eval.samples",
            "expected an integer from 1 to 65536, found string '4'",
        ),
        (("decode_defaults", "steps"), "ten", "decode_defaults.steps", "found string 'ten'"),
    ],
)
def test_the_issues_malformed_fields_name_field_type_and_value(base, tmp_path, path, value, field, expected):
    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    (work / MANIFEST).write_text(json.dumps(_mutated(doc, path, value)))
    with pytest.raises(BundleError) as info:
        Bundle.load(work)
    assert f"manifest {work / MANIFEST} field {field}: " in str(info.value) and expected in str(info.value)
    for cmd in (["inspect"], ["run", *RUN]):
        r = runner.invoke(app, [cmd[0], str(work), *cmd[1:]])
        _clean(r, cmd)
        assert r.exit_code == 1 and f"field {field}: " in r.stderr


def test_conditioning_must_name_a_graph_input(base, tmp_path):
    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    doc = _mutated(doc, ("model", "meta", "conditioning"), {"class_id": {"uncond": 3}, "speaker": {"uncond": 0}})
    (work / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(
        BundleError, match="field model.meta.conditioning: expected names of graph inputs .* found 'speaker'"
    ):
        Bundle.load(work)


@pytest.mark.parametrize("meta", [{}, {"vocab_size": 16, "mask_id": 16}])
def test_metadata_the_kind_needs_is_checked_at_load(base, tmp_path, meta):
    """The decode loop and the metrics read the kind's metadata (spec.KIND_META): a manifest
    without it is one line at load, never a KeyError inside `check` (found by the mutation sweep)."""
    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    (work / MANIFEST).write_text(json.dumps(_mutated(doc, ("model", "meta"), meta)))
    lacks = "vocab_size, mask_id, seq_len" if not meta else "seq_len"
    with pytest.raises(BundleError, match=f"field model.meta: a masked model's metadata lacks {lacks} \\("):
        Bundle.load(work)
    r = runner.invoke(app, ["check", str(work)])
    assert isinstance(r.exception, SystemExit) and r.exit_code == 1, repr(r.exception)
    assert "field model.meta: a masked model's metadata lacks" in r.stderr


def test_fields_from_a_newer_edgekit_are_ignored(base, tmp_path):
    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    doc = copy.deepcopy(doc)
    doc["telemetry"] = {"opt_in": False}
    doc["model"]["license"] = "apache-2.0"
    doc["artifacts"]["fp32"]["signature"] = {"alg": "ed25519", "sig": "00"}
    doc["engines"]["cpu/fp32"]["numa_node"] = 0
    doc["decode_defaults"]["new_option_of_v2"] = "yes"
    (work / MANIFEST).write_text(json.dumps(doc))
    b = Bundle.load(work)
    assert b.artifact("fp32").path == doc["artifacts"]["fp32"]["path"]
    for cmd in (["inspect"], ["run", *RUN]):
        r = runner.invoke(app, [cmd[0], str(work), *cmd[1:]])
        assert r.exit_code == 0, r.output
