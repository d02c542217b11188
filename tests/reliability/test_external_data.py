"""Models whose weights live in an ONNX external-data side file (issue #19, item 2), forced on a
tiny model with ``external_data_mb=0``: the side file gets a final content-addressed name, is hashed
(tampering is refused), packed, and survives an interrupted re-export."""

import tarfile

import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from edgekit.errors import BundleError, ExportError

runner = CliRunner()


@pytest.fixture
def external(tiny_specs, tmp_path):
    from edgekit.export import ExportConfig
    from edgekit.export.to_bundle import export_bundle

    return export_bundle(tiny_specs["masked"], tmp_path / "ext", ExportConfig(external_data_mb=0), source="tiny").root


def test_side_file_is_named_hashed_and_recorded(external):
    bundle = Bundle.load(external)
    art = bundle.manifest["artifacts"]["fp32"]
    (side,) = art["side_files"]
    assert side["path"].startswith("fp32-") and side["path"].endswith(".onnx.data")
    assert (external / side["path"]).stat().st_size == side["bytes"] > 0
    assert sorted(p.name for p in external.iterdir() if not p.name.startswith(".")) == sorted(
        ["edgekit.json", art["path"], side["path"]]
    )
    r = runner.invoke(app, ["run", str(external), "--cond", "class_id=1", "--steps", "2"])
    assert r.exit_code == 0, r.output


def test_tampered_side_file_is_refused(external):
    bundle = Bundle.load(external)
    side = external / bundle.manifest["artifacts"]["fp32"]["side_files"][0]["path"]
    data = bytearray(side.read_bytes())
    data[: len(data) // 100 + 1] = bytes(len(data) // 100 + 1)  # zero 1 %
    side.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="side file .* does not match its recorded sha256"):
        Bundle.load(external)


def test_side_file_is_packed_and_unpacks_loadable(external, tmp_path):
    from edgekit.deploy.pack import pack_bundle, unpack_bundle

    doc = pack_bundle(external, tmp_path / "b.tar.gz")
    side = Bundle.load(external).manifest["artifacts"]["fp32"]["side_files"][0]["path"]
    assert side in doc["files"]
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        assert f"ext/{side}" in tar.getnames()
    out = unpack_bundle(tmp_path / "b.tar.gz", tmp_path / "dest")
    Bundle.load(out["bundle"])  # every hash, side file included


def test_failed_reexport_keeps_the_previous_side_file(external, tiny_specs, monkeypatch):
    from edgekit.export import ExportConfig, to_bundle

    before = Bundle.load(external).manifest["artifacts"]

    def fail(*a, **k):
        raise ExportError("verification interrupted")

    monkeypatch.setattr(to_bundle, "compare", fail)
    with pytest.raises(ExportError):
        to_bundle.export_bundle(tiny_specs["masked"], external, ExportConfig(external_data_mb=0), source="tiny")
    after = Bundle.load(external)  # still loads: old graph and old side file intact
    assert after.manifest["artifacts"] == before
    assert not [p for p in external.iterdir() if p.name.startswith(".staging-")]


# ---- every stage on an external-data bundle (issue #30, item 1) ----------------------------------
@pytest.fixture(scope="module")
def ext_built(tiny_specs, tmp_path_factory):
    """One external-data bundle, quantized (cpu profile) once for the module's tests."""
    from edgekit.export import ExportConfig
    from edgekit.export.to_bundle import export_bundle

    root = export_bundle(
        tiny_specs["masked"], tmp_path_factory.mktemp("extq") / "ext", ExportConfig(external_data_mb=0), source="tiny"
    ).root
    r = runner.invoke(app, ["quantize", str(root), "--calib-samples", "4", "--eval-samples", "4"])
    assert r.exit_code in (0, 4), r.output
    return root


@pytest.mark.parametrize(
    "target, precision",
    [
        ("cpu", "fp32"),
        ("cpu", "int8"),
        ("arm64-cpu", "fp32"),
        ("rpi5", "int8"),
        ("intel-cpu", "fp32"),
        ("android-arm64", "fp32"),
        ("snapdragon-8-gen-3", "fp16"),
    ],
)
def test_builds_for_every_target_and_the_engine_runs(ext_built, tmp_path, target, precision):
    import shutil

    from edgekit._sidefiles import external_data_locations

    bundle = shutil.copytree(ext_built, tmp_path / "ext")
    r = runner.invoke(app, ["build", str(bundle), "--target", target, "--precision", precision, "--json"])
    assert r.exit_code == 0, r.output
    import json

    entry = json.loads(r.stdout)["engine"]
    engine = bundle / entry["path"]
    if engine.suffix == ".onnx":  # every weights file the engine reads lies beside it and is recorded
        reads = external_data_locations(engine)
        assert reads == ({entry["external_data"]["path"].rsplit("/", 1)[-1]} if "external_data" in entry else set())
        assert all((engine.parent / name).is_file() for name in reads)
    if target in ("cpu", "intel-cpu", "snapdragon-8-gen-3"):  # runnable on this host
        r = runner.invoke(
            app,
            ["run", str(bundle), "--target", target, "--precision", precision, "--cond", "class_id=1", "--steps", "2"],
        )
        assert r.exit_code == 0, r.output
    out = tmp_path / "p.tar.gz"
    pack_doc = runner.invoke(app, ["pack", str(bundle), "--target", target, "-o", str(out), "--json"])
    assert pack_doc.exit_code == 0, pack_doc.output
    from edgekit.deploy.pack import unpack_bundle

    unpacked = unpack_bundle(out, tmp_path / "device")["bundle"]
    Bundle.load(unpacked)
    if target == "cpu":
        r = runner.invoke(
            app, ["run", unpacked, "--target", "cpu", "--precision", precision, "--cond", "class_id=1", "--steps", "2"]
        )
        assert r.exit_code == 0, r.output


@pytest.mark.parametrize("target", ["jetson-orin-nano", "snapdragon-8-gen-3", "android-arm64", "intel-cpu"])
def test_lint_reads_an_external_data_bundle(ext_built, target):
    r = runner.invoke(app, ["lint", str(ext_built), "--target", target, "--json"])
    assert r.exit_code in (0, 4), r.output  # 4: a finding that is not about external data (int8 profile)
    import json

    errors = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]
    assert not [f for f in errors if "external" in f["message"].lower() or "not regular file" in f["message"]], errors


def test_check_and_profile_an_external_data_bundle(ext_built):
    r = runner.invoke(app, ["check", str(ext_built), "--n", "2"])
    assert r.exit_code in (0, 4) and "Traceback" not in r.output, r.output
    r = runner.invoke(app, ["profile", str(ext_built), "--iters", "1", "--warmup", "0", "--steps", "1"])
    assert r.exit_code == 0, r.output


def test_engine_reading_an_unrecorded_weights_file_is_stale(ext_built, tmp_path):
    """An engine an older edgekit built names the source's side file beside itself, where it is not."""
    import json
    import shutil

    bundle = shutil.copytree(ext_built, tmp_path / "ext")
    assert runner.invoke(app, ["build", str(bundle), "--target", "cpu"]).exit_code == 0
    doc = json.loads((bundle / "edgekit.json").read_text())
    doc["engines"]["cpu/fp32"].pop("external_data")
    (bundle / "edgekit.json").write_text(json.dumps(doc))
    r = runner.invoke(app, ["run", str(bundle), "--target", "cpu", "--cond", "class_id=1"])
    assert r.exit_code == 1 and "a file its entry does not record" in r.stderr and "--rebuild" in r.stderr, r.output
    assert r.stderr.count("error:") == 1


def test_qnn_profile_quantizes_an_external_data_bundle(tiny_specs, tmp_path):
    from edgekit.export import ExportConfig
    from edgekit.export.to_bundle import export_bundle

    root = export_bundle(tiny_specs["masked"], tmp_path / "ext", ExportConfig(external_data_mb=0), source="tiny").root
    r = runner.invoke(app, ["quantize", str(root), "--profile", "qnn", "--calib-samples", "2", "--eval-samples", "2"])
    assert r.exit_code in (0, 4), r.output
    r = runner.invoke(app, ["build", str(root), "--target", "snapdragon-8-gen-3", "--precision", "int8"])
    assert r.exit_code == 0, r.output
