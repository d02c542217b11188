"""`edgekit pack`: only what a target needs, a bundle that loads after unpacking; and
`safe_extract` refuses every member that would land outside the destination."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from edgekit.builder import build_bundle
from edgekit.bundle import Bundle
from edgekit.deploy import PACK_SCHEMA, pack_bundle, safe_extract
from edgekit.errors import BundleError, UsageError


def members(path) -> set[str]:
    with tarfile.open(path) as tar:
        return {m.name for m in tar.getmembers()}


@pytest.fixture
def built(masked):
    """The masked demo with engines for cpu (this CPU) and android-arm64 (.ort)."""
    build_bundle(masked, "cpu", "fp32")
    build_bundle(masked, "android-arm64", "fp32")
    return Bundle.load(masked)


def test_pack_for_a_target_keeps_only_its_engines(built, tmp_path):
    out = tmp_path / "android.tar.gz"
    doc = pack_bundle(built.root, out, "android-arm64")
    android = built.manifest["engines"]["android-arm64/fp32"]
    assert doc["schema"] == PACK_SCHEMA and doc["target"] == "android-arm64"
    assert members(out) == {
        f"masked/{p}"
        for p in ("edgekit.json", built.artifact("fp32").path, android["path"], android["required_operators"]["path"])
    }
    assert doc["left_out"] == [f"engine cpu/fp32 ({built.manifest['engines']['cpu/fp32']['path']})"]
    dest = tmp_path / "device"
    safe_extract(out, dest)
    unpacked = Bundle.load(dest / "masked")  # hashes verified
    assert list(unpacked.manifest["engines"]) == ["android-arm64/fp32"]
    assert unpacked.manifest["packed"]["target"] == "android-arm64"
    assert (dest / "masked" / android["path"]).read_bytes() == (built.root / android["path"]).read_bytes()


def test_pack_without_target_has_everything_the_manifest_names_and_nothing_else(built, tmp_path):
    (built.root / "notes.txt").write_text("not part of the bundle")
    out = tmp_path / "all.tar.gz"
    doc = pack_bundle(built.root, out)
    names = members(out)
    assert (
        "masked/notes.txt" not in names and len(names) == len(doc["files"]) == 5
    )  # manifest, fp32, .onnx, .ort, .config
    assert doc["left_out"] == ["file notes.txt (the manifest does not name it)"]  # said, never silent (issue #30)


def test_pack_for_rpi5_leaves_out_other_targets(built, tmp_path):
    out = tmp_path / "rpi5.tar.gz"
    pack_bundle(built.root, out, "rpi5")
    assert members(out) == {"masked/edgekit.json", f"masked/{built.artifact('fp32').path}"}


def test_pack_refuses_to_write_into_the_bundle(built):
    with pytest.raises(UsageError, match="is inside the bundle"):
        pack_bundle(built.root, built.root / "x.tar.gz")


def _archive(tmp_path, *entries: tarfile.TarInfo) -> str:
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as tar:
        ok = tarfile.TarInfo("bundle/edgekit.json")
        data = b"{}"
        ok.size = len(data)
        tar.addfile(ok, io.BytesIO(data))
        for info in entries:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return str(path)


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 1) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = size if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    "entry,why",
    [
        (_info("/etc/cron.d/evil"), "has an absolute path"),
        (_info("../escaped.txt"), "contains '..'"),
        (_info("bundle/../../escaped.txt"), "contains '..'"),
        (_info("bundle/passwd", tarfile.SYMTYPE, "/etc/passwd"), "is a link (to '/etc/passwd'); bundles hold no links"),
        (_info("bundle/up", tarfile.SYMTYPE, "../../outside"), "is a link (to '../../outside')"),
        (_info("bundle/hard", tarfile.LNKTYPE, "../outside"), "is a link (to '../outside')"),
        (
            _info("bundle/l1", tarfile.SYMTYPE, "."),
            "is a link (to '.')",
        ),  # l1 -> ., l1/l2 -> .., l1/l2/file (issue #19)
        (_info("bundle/tty", tarfile.CHRTYPE), "is a device or FIFO"),
        (_info("bundle/pipe", tarfile.FIFOTYPE), "is a device or FIFO"),
    ],
)
def test_safe_extract_refuses_members_that_escape(tmp_path, entry, why):
    dest = tmp_path / "dest"
    with pytest.raises(BundleError) as err:
        safe_extract(_archive(tmp_path, entry), dest)
    assert why in str(err.value) and repr(entry.name) in str(err.value)
    assert not dest.exists()  # nothing written, not even the good member
    assert not (tmp_path / "escaped.txt").exists()


def test_safe_extract_refuses_even_links_that_stay_inside(tmp_path):
    """Bundles hold no links, so none is accepted: a check by name alone cannot be fooled by
    links that only exist once earlier members are written."""
    archive = _archive(
        tmp_path, _info("bundle/model.onnx", size=4), _info("bundle/latest.onnx", tarfile.SYMTYPE, "model.onnx")
    )
    with pytest.raises(BundleError, match="bundles hold no links"):
        safe_extract(archive, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_safe_extract_on_something_else(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_text(json.dumps({"not": "a tarball"}))
    with pytest.raises(BundleError, match="is not a readable tar archive"):
        safe_extract(junk, tmp_path / "dest")


def test_not_a_tarball_is_one_line(tmp_path):
    from edgekit.deploy import safe_extract
    from edgekit.errors import BundleError

    junk = tmp_path / "junk.tar.gz"
    junk.write_text("not a tarball\n")
    with pytest.raises(BundleError) as info:
        safe_extract(junk, tmp_path / "out")
    assert "\n" not in str(info.value) and "not a readable tar archive" in str(info.value)


def test_pack_for_a_target_keeps_the_rows_quantize_gated_on(tiny_bundles, tmp_path):
    """Issue #31: `pack --target` dropped the `conditions` artifact, and `check` on the device
    silently decoded other rows than quantize's budget judged. After pack -> unpack, a default
    `check` judges the same stored rows and gives the same gated metrics."""
    import shutil

    import numpy as np

    from edgekit.check import CheckConfig, check_bundle
    from edgekit.deploy import unpack_bundle
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    bundle = Path(shutil.copytree(tiny_bundles["masked"], tmp_path / "masked"))
    np.savez(tmp_path / "cond.npz", class_id=np.array([2, 0, 1, 2, 1, 0, 2, 2]))
    quantize_bundle(
        bundle,
        QuantizeConfig(
            calib_samples=2,
            eval_samples=4,
            cond_data=str(tmp_path / "cond.npz"),
            budget={"check_margin": -1.0},
            fallback=False,
        ),
    )
    assert Bundle.load(bundle).has("conditions")
    before = check_bundle(bundle, CheckConfig())
    doc = pack_bundle(bundle, tmp_path / "cpu.tar.gz", "cpu")
    assert not any(item.startswith("artifact conditions") for item in doc["left_out"])
    unpacked = unpack_bundle(tmp_path / "cpu.tar.gz", tmp_path / "device")["bundle"]
    assert Bundle.load(unpacked).has("conditions")
    after = check_bundle(unpacked, CheckConfig())
    assert "held-out rows" in after["conditions"] and after["conditions"] == before["conditions"]
    assert after["n"] == before["n"] == 4
    assert after["metrics"] == before["metrics"]
    assert [(r["metric"], r["passed"]) for r in after["rows"]] == [(r["metric"], r["passed"]) for r in before["rows"]]
