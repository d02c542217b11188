"""Whether a bundle's int8 model is the one its quantization summary describes.

``edgekit quantize`` records, beside its summary (budget, fallbacks, speed, arithmetic), the
sha256 of every file of the int8 model it wrote (``quantization.int8_files``: each int8
artifact's graph and side files, step buckets' graphs too). A model put in its place afterwards
(``Bundle.add_artifact("int8", ...)``, or a file copied over it and the manifest edited to match)
still loads, since the artifacts section hashes whatever is there, but the summary then describes
another model. ``int8_match`` says so; ``inspect`` shows it, ``check``, ``build`` and ``profile``
warn (``check --strict`` fails).

The files are hashed through ``manifest.sha256_seen``: after ``Bundle.load`` verified them, the
answer costs a ``stat`` per file, not another read of a 2 GiB model."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from edgekit.bundle import Bundle
from edgekit.errors import BundleError
from edgekit.manifest import inside, sha256_seen

MATCHES, DIFFERS, NOT_RECORDED = "matches", "differs", "not recorded"


@dataclass(frozen=True)
class Int8Match:
    """The answer for one bundle. ``status``: ``matches``, ``differs`` (``artifact``'s ``file``
    is not what quantize wrote: ``recorded`` its sha256 then, None where quantize wrote no such
    file; ``actual`` its sha256 now, None where the file quantize wrote is gone) or ``not
    recorded`` (an int8 model without quantize's record: an older edgekit, or none quantize made)."""

    status: str
    artifact: str | None = None
    file: str | None = None
    recorded: str | None = None
    actual: str | None = None

    def warning(self, root: Any) -> str | None:
        """One line naming the file and the fix, for ``differs``; None otherwise."""
        if self.status != DIFFERS:
            return None
        was = f"quantize wrote sha256 {self.recorded[:12]}…" if self.recorded else "quantize wrote no such file"
        now = f"now {self.actual[:12]}…" if self.actual else "now gone"
        return (
            f"bundle {root}: the int8 model's file {self.file} (artifact {self.artifact!r}) is not the one "
            f"`edgekit quantize` made ({was}, {now}), so the quantization summary (budget, fallbacks, speed) "
            f"describes another model; re-run `edgekit quantize {root}` or restore the file"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "artifact": self.artifact,
            "file": self.file,
            "recorded_sha256": self.recorded,
            "actual_sha256": self.actual,
        }


def int8_match(bundle: Bundle) -> Int8Match | None:
    """Does the bundle's int8 model match what quantize made? None: the bundle has no int8
    model. Every recorded artifact is compared file by file: its graph, then its side files by
    content (``recorded`` is what quantize wrote under the differing file's name, if anything).
    Answered from ``sha256_seen``: no file is read again after ``Bundle.load`` verified it."""
    if not bundle.has("int8"):
        return None
    q = bundle.quantization
    recorded = q.int8_files if q is not None else None
    if recorded is None:
        return Int8Match(NOT_RECORDED)
    if "int8" not in recorded:  # a record of bucket graphs only: the model it described is not this one
        path = bundle.artifact("int8").path
        return Int8Match(DIFFERS, "int8", path, None, _hash(bundle, path))
    for name, files in recorded.items():
        if not bundle.has(name) or not files:
            first = files[0] if files else None
            return Int8Match(DIFFERS, name, first.path if first else name, first.sha256 if first else None, None)
        art = bundle.artifact(name)
        graph = _hash(bundle, art.path)
        if graph != files[0].sha256:
            return Int8Match(DIFFERS, name, art.path, files[0].sha256, graph)
        wrote = {f.path: f.sha256 for f in files[1:]}
        now = {str(s["path"]): _hash(bundle, str(s["path"])) for s in art.side_files}
        for path, digest in now.items():
            if digest is None or digest not in wrote.values():
                return Int8Match(DIFFERS, name, path, wrote.get(path), digest)
        for path, digest in wrote.items():
            if digest not in now.values():
                return Int8Match(DIFFERS, name, path, digest, None)
    return Int8Match(MATCHES)


def int8_warnings(bundle: Bundle, precisions: Iterable[str] = ("int8",)) -> tuple[Int8Match | None, list[str]]:
    """(``int8_match``, its warning as a list) when one of ``precisions`` reads the int8 model or
    its summary (``build --precision auto`` too); else (None, [])."""
    if not {"int8", "auto"} & set(precisions):
        return None, []
    match = int8_match(bundle)
    line = match.warning(bundle.root) if match is not None else None
    return match, [line] if line else []


def _hash(bundle: Bundle, rel: str) -> str | None:
    """The sha256 of the bundle's file ``rel`` now; None where it is gone (or, in a manifest
    loaded unverified, points outside the bundle)."""
    try:
        path = inside(bundle.root, rel)
        return sha256_seen(path) if path.is_file() else None
    except (BundleError, OSError):
        return None
