"""`edgekit unpack` under attack (issue #19, item 4): link chains, corrupt and truncated archives,
size and member-count bombs. Nothing lands outside the folder, a good bundle already there is never
overwritten by a bad archive, and every failure is one line."""

import io
import shutil
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from edgekit.deploy import pack_bundle, safe_extract, unpack_bundle
from edgekit.deploy import unpack as unpack_module
from edgekit.errors import BundleError

runner = CliRunner()


@pytest.fixture
def packed(tiny_bundles, tmp_path):
    src = shutil.copytree(tiny_bundles["masked"], tmp_path / "masked")
    pack_bundle(src, tmp_path / "m.tar.gz")
    return tmp_path / "m.tar.gz"


def _tar(path, entries):
    with tarfile.open(path, "w") as tar:
        for name, kind, link, data in entries:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return path


def _one_line(r):
    assert "Traceback" not in r.output and r.stderr.count("\n") == 1, r.output


def test_link_chain_is_refused_before_writing(tmp_path):
    """l1 -> ., l1/l2 -> .., l1/l2/file: passes a check that resolves paths on disk before the
    links exist; refused here by name (no links at all)."""
    archive = _tar(
        tmp_path / "chain.tar",
        [
            ("l1", tarfile.SYMTYPE, ".", b""),
            ("l1/l2", tarfile.SYMTYPE, "..", b""),
            ("l1/l2/escaped", tarfile.REGTYPE, "", b"pwned"),
        ],
    )
    r = runner.invoke(app, ["unpack", str(archive), "-o", str(tmp_path / "dest")])
    assert r.exit_code == 1 and "is a link" in r.stderr
    _one_line(r)
    assert not list(tmp_path.rglob("escaped"))


def test_corrupt_archive_leaves_the_good_bundle_alone(packed, tmp_path):
    dest = tmp_path / "device"
    unpack_bundle(packed, dest)
    good = {p.name: p.read_bytes() for p in (dest / "masked").iterdir()}
    data = bytearray(packed.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 8):
        data[i] ^= 0xFF
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bytes(data))
    r = runner.invoke(app, ["unpack", str(bad), "-o", str(dest)])
    assert r.exit_code == 1 and str(bad) in r.stderr
    _one_line(r)
    assert {p.name: p.read_bytes() for p in (dest / "masked").iterdir()} == good
    Bundle.load(dest / "masked")
    assert [p.name for p in dest.iterdir()] == ["masked"]  # no staging litter


def test_tampered_member_fails_verification_without_replacing(packed, tmp_path):
    dest = tmp_path / "device"
    unpack_bundle(packed, dest)
    with tarfile.open(packed) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        for m, data in members:
            if m.name.endswith(".onnx"):
                data = bytes(len(data))  # same size, wrong hash
            tar.addfile(m, io.BytesIO(data))
    with pytest.raises(BundleError, match="does not verify"):
        unpack_bundle(evil, dest)
    Bundle.load(dest / "masked")


@pytest.mark.parametrize("cut", [10, 0.5, -20])
def test_truncated_gzip_is_one_line_naming_the_file(packed, tmp_path, cut):
    data = packed.read_bytes()
    n = int(len(data) * cut) if isinstance(cut, float) else cut % len(data)
    short = tmp_path / "short.tar.gz"
    short.write_bytes(data[:n])
    r = runner.invoke(app, ["unpack", str(short), "-o", str(tmp_path / "dest")])
    assert r.exit_code == 1 and str(short) in r.stderr
    _one_line(r)
    assert not (tmp_path / "dest" / "masked").exists()


def test_size_bomb_is_refused_before_writing(tmp_path, monkeypatch):
    info = tarfile.TarInfo("b/huge.bin")
    info.size = 10 << 30  # a header claiming 10 GiB; the data is never written
    path = tmp_path / "bomb.tar"
    with open(path, "wb") as fh:  # a sparse file on disk: the header, a hole, the end blocks
        fh.write(info.tobuf())
        fh.seek(512 + info.size)
        fh.write(bytes(1024))
    with pytest.raises(BundleError, match="would unpack to 10737418240 bytes"):
        safe_extract(path, tmp_path / "dest", max_bytes=1 << 30)
    assert not (tmp_path / "dest").exists()
    small = _tar(tmp_path / "small.tar", [("b/f", tarfile.REGTYPE, "", bytes(1000))])
    with pytest.raises(BundleError, match="more than the limit"):
        safe_extract(small, tmp_path / "dest", max_bytes=999)


def test_member_count_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(unpack_module, "MAX_MEMBERS", 5)
    archive = _tar(tmp_path / "many.tar", [(f"b/{i}", tarfile.REGTYPE, "", b"") for i in range(6)])
    with pytest.raises(BundleError, match="more than 5 members"):
        safe_extract(archive, tmp_path / "dest")


def test_not_a_bundle_archive(tmp_path):
    archive = _tar(tmp_path / "x.tar", [("a/file", tarfile.REGTYPE, "", b"x"), ("b/file", tarfile.REGTYPE, "", b"y")])
    with pytest.raises(BundleError, match="not a bundle archive"):
        unpack_bundle(archive, tmp_path / "dest")
    assert list((tmp_path / "dest").iterdir()) == []


names = st.lists(st.sampled_from(["a", "..", ".", "/", "b", "l", "/etc", "\\\\", "C:"]), min_size=1, max_size=4).map(
    "/".join
)
kinds = st.sampled_from(
    [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)
@given(entries=st.lists(st.tuples(names, kinds, names), min_size=1, max_size=5))
def test_any_member_list_stays_inside_or_is_refused(tmp_path_factory, entries):
    tmp = tmp_path_factory.mktemp("fuzz")
    archive = _tar(tmp / "f.tar", [(n, k, link, b"x") for n, k, link in entries])
    dest = tmp / "box" / "dest"
    try:
        safe_extract(archive, dest)
    except BundleError as exc:
        assert "\n" not in str(exc)
    outside = [p for p in tmp.rglob("*") if dest not in (p, *p.parents) and p.name not in ("f.tar", "box")]
    assert outside == []
    assert not [p for p in tmp.rglob("*") if p.is_symlink()]
