"""Which files an ONNX model reads beside itself (external data), read from its bytes without onnx,
and the one rule for when edgekit writes a model's weights to such a file.

The rule (``wants_external_data``): a model whose weights weigh more than the threshold
(``EDGEKIT_EXTERNAL_DATA_MB``, default 64 MiB) keeps them in a side file; below it they stay
inside the ``.onnx``. Protobuf cannot serialize a message of 2 GiB or more, so a model over that
must have external data. Below the limit, weights inside the file still cost memory wherever a
whole model passes through protobuf: serializing a 277 MiB model in memory peaked at 4.4x its
weights (upb grows its buffer by doubling, then copies it out), so writing it peaked at 2.6 GB,
and opening it in ONNX Runtime (edgekit's in-memory graph fusions) at about 6x; with a side file,
export peaked at 0.6x over the torch module and the session at 1x, read from the mapped file.
The threshold bounds that overhead (about 0.4 GB at 64 MiB) while a small model (the demos, a
Matcha-TTS decoder) stays one file. ``EDGEKIT_EXTERNAL_DATA_MB=0`` forces a side file on any
model (how the tests put a tiny model through the code paths of a 2 GB one).

A tensor stored outside the model carries ``external_data`` entries ``{key: "location", value:
FILE}``; serialized, each is the bytes ``0a 08 "location" 12 <varint len> FILE``. Finding them
needs no protobuf parser and no heavy import, so every ``Bundle.load`` can afford to check that an
ONNX artifact reads no file its manifest does not list (a side file edgekit never hashed).
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from edgekit.errors import BundleError, UsageError

EXTERNAL_DATA_ENV = "EDGEKIT_EXTERNAL_DATA_MB"
DEFAULT_EXTERNAL_DATA_MB = 64
# The most a user may keep inside one .onnx: protobuf's 2 GiB less room for the graph itself.
MAX_EXTERNAL_DATA_MB = 1792
# A message protobuf can serialize is below this (int32 sizes): the hard limit for an in-memory model.
PROTOBUF_LIMIT = (1 << 31) - 1
# Tensors under this stay inside the .onnx even with external data (shapes, scales, zero points,
# the constants shape inference and lint read); weights go to the side file. onnx.save's default.
INLINE_TENSOR_BYTES = 1024

_KEY = b"\x0a\x08location\x12"
# An EPContext node's ``ep_cache_context`` attribute (``0a 10 "ep_cache_context" 22 <len> VALUE``):
# with embed_mode 0 the file name of the compiled context binary beside the model, else the
# binary itself (which is no file name: it holds control bytes).
_CONTEXT_KEY = b"\x0a\x10ep_cache_context\x22"
_MAX_NAME = 4096


def external_data_threshold(mb: float | None = None) -> int:
    """Bytes of weights above which a model is written with external data: ``mb`` (MiB) when
    given, else ``EDGEKIT_EXTERNAL_DATA_MB``, else the default; a bad value is one clear error."""
    raw: Any = mb
    if raw is None:
        raw = os.environ.get(EXTERNAL_DATA_ENV, "") or DEFAULT_EXTERNAL_DATA_MB
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not math.isfinite(value) or not 0 <= value <= MAX_EXTERNAL_DATA_MB:
        what = f"{EXTERNAL_DATA_ENV}={raw!r}" if mb is None else f"external_data_mb={raw!r}"
        raise UsageError(
            f"{what} is not a number of MiB in [0, {MAX_EXTERNAL_DATA_MB}] (protobuf caps a .onnx at 2 GiB)",
            hint=f"e.g. {EXTERNAL_DATA_ENV}={DEFAULT_EXTERNAL_DATA_MB}; 0 writes every model's weights to a side file",
        )
    return int(value * (1 << 20))


def wants_external_data(weight_bytes: int, mb: float | None = None) -> bool:
    """The rule: weights over the threshold (``external_data_threshold``) go to a side file."""
    return weight_bytes > external_data_threshold(mb)


def model_bytes(path: Path) -> int:
    """What an ONNX model at ``path`` weighs on disk: the file and every side file it reads
    (its weights, wherever they live; the graph itself is small beside them)."""
    return path.stat().st_size + sum(
        (path.parent / name).stat().st_size for name in external_data_locations(path) if (path.parent / name).is_file()
    )


def external_data_locations(path: Path) -> set[str]:
    """The file names an ONNX model at ``path`` reads beside itself: its tensors' external data and
    an EPContext node's context binary (empty: everything inside the file)."""
    out: set[str] = set()
    with open(path, "rb") as fh:
        try:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file
            return out
        with data:
            for key in (_KEY, _CONTEXT_KEY):
                out |= {name for name in _string_values(data, key) if key is _KEY or _is_file_name(name)}
    return out


def remove_model(path: Path) -> None:
    """Delete the ONNX model at ``path`` and the side file that is its own (``<name>.data``, the
    name ``save_onnx`` and ORT's quantizer give it), never a file it reads that another model
    wrote: a derived quantize candidate reads the all-INT8 graph's and the prepared model's."""
    path = Path(path)
    if path.is_file() and path.name + ".data" in external_data_locations(path):
        (path.parent / (path.name + ".data")).unlink(missing_ok=True)
    path.unlink(missing_ok=True)


def _string_values(data: Any, key: bytes) -> set[str]:
    """The length-delimited values that follow ``key`` (a field tag) in ``data``, up to _MAX_NAME bytes."""
    out: set[str] = set()
    i = data.find(key)
    while i >= 0:
        start = i + len(key)
        length, shift, j = 0, 0, start
        while j < len(data) and j - start < 5:
            byte = data[j]
            length |= (byte & 0x7F) << shift
            shift += 7
            j += 1
            if not byte & 0x80:
                break
        name = data[j : j + length]
        if 0 < length <= _MAX_NAME and len(name) == length:
            out.add(name.decode("utf-8", "replace"))
        i = data.find(key, start)
    return out


def _is_file_name(value: str) -> bool:
    return value.isprintable() and "\ufffd" not in value and not value.startswith("/")


def place_side_files(model_path: Path, folder: Path, link: bool = True) -> None:
    """Make the files ``model_path`` reads beside itself readable from ``folder`` too (a copy of
    its graph written there names them): hard links, a copy only across file systems (a 2 GB
    weights file is not copied to be read once). ``link=False``: always a copy, for a graph that
    onnx itself will read with its weights while the copy lives (onnx refuses external data in a
    file with more than one link, and the link would make the bundle's own file unreadable to it
    too: ``side_files_beside``)."""
    import shutil

    for name in external_data_locations(model_path):
        src, dest = model_path.parent / name, folder / name
        if dest.exists() or not src.is_file():
            continue
        try:
            if not link:
                raise OSError("a copy was asked for")
            os.link(src, dest)
        except OSError:
            shutil.copyfile(src, dest)


@contextlib.contextmanager
def side_files_beside(model_path: Path, folder: Path) -> Iterator[None]:
    """``place_side_files`` for as long as the block runs (open the session in it), then the links
    go: onnx refuses external data in a file with more than one link ("possible hardlink
    attack"), so a link left in a scratch folder made the bundle's own weights unreadable to
    onnx while it lived; a runtime holds what it read (or mapped) past the unlink. Symbolic
    links are no way round: onnx and onnxruntime both refuse data outside the model's folder."""
    before = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    place_side_files(model_path, folder)
    made = [folder / n for n in external_data_locations(model_path) if n not in before]
    try:
        yield
    finally:
        for path in made:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def tensors_read_from(folder: Path) -> Iterator[None]:
    """The process's working directory at ``folder`` for the block, so that onnx finds the side
    file of a tensor read without a folder (``numpy_helper.to_array(tensor)``: relative to the
    working directory; onnx refuses absolute and ``..`` locations). For graphs read without their
    weights and handed to code that reads a weight when it needs it (ORT's quantizer, its symbolic
    shape inference). Process-wide: callers pass absolute paths to whatever runs in the block."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def check_side_files_listed(path: Path, name: str, doc: Mapping[str, Any]) -> None:
    """Refuse artifact ``name`` (its manifest entry ``doc``, file ``path``) when it is an ONNX file
    that reads weights from a file its entry does not list (a bundle from an older edgekit):
    edgekit would load that file unhashed, pack would leave it out, unpack would call it verified."""
    if path.suffix != ".onnx":
        return
    listed = {str(s.get("path")) for s in doc.get("side_files") or [] if isinstance(s, Mapping)}
    unlisted = sorted(external_data_locations(path) - listed)
    if unlisted:
        raise BundleError(
            f"artifact {name!r} ({doc.get('path')}) reads weights "
            f"from {unlisted[0]!r}, a file its manifest does not list "
            "(a bundle from an older edgekit?); edgekit loads no unhashed file",
            hint=(
                "re-run the stage that made it (fp32: `edgekit export "
                "MODEL -o BUNDLE`, int8: `edgekit quantize BUNDLE`)"
            ),
        )
