"""Import a user's ``package.module:function`` or ``path/to/file.py:function``, and decide whether
code a bundle's manifest names may run.

THIS RUNS USER CODE: the module is imported (a file is executed). Used for model factories
(`edgekit export`), quality-metric hooks (`edgekit check --metric`), and code the manifest names
(the condition sampler, the model source `--runtime torch` rebuilds).

Code the user names on the command line runs: they said so. Code a manifest names runs only when
this user exported that bundle here (a record outside the bundle, written by `edgekit export`,
keyed by the bundle's real path) and the file's sha256 still matches; anything else (a bundle
copied, unpacked or pulled from elsewhere, a code file inside the bundle folder, a file changed
since export) needs ``--trust-code`` (``TRUST_CODE``), said in one line.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError, UsageError
from edgekit.manifest import sha256_file

FORMS = "package.module:function or path/to/file.py:function"
# Set by the CLI's --trust-code: run code a manifest names even when this user did not export it.
TRUST_CODE: contextvars.ContextVar[bool] = contextvars.ContextVar("edgekit_trust_code", default=False)
# edgekit's own factories: the built-in models are never a bundle's foreign code.
_OWN = "edgekit.models."


def load_callable(
    ref: str, what: str, forms: str = FORMS, error: type[EdgekitError] = UsageError, search_path: str | None = None
) -> Callable:
    """The function ``ref`` names; ``what`` ("model factory", "metric hook") words the errors;
    ``error`` is the type raised for a malformed or missing reference (``forms`` in its hint).

    A ``file.py`` is imported with its own folder first on ``sys.path`` (so it can import a module
    beside it), ``search_path`` likewise for a package; both only while importing."""
    target, sep, func = ref.rpartition(":")
    if not sep or not target or not func:
        raise error(f"{what} {ref!r} is not module:function", hint=f"use {forms}")
    try:
        if target.endswith(".py"):
            path = Path(target)
            if not path.is_file():
                raise error(f"{what} file {target!r} does not exist", hint=_suggest_file(path) or f"use {forms}")
            name = f"edgekit_user_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[name] = module
            with _on_sys_path(str(path.resolve().parent)):
                spec.loader.exec_module(module)  # type: ignore[union-attr]  # runs the user's code
        else:
            with _on_sys_path(search_path):
                module = importlib.import_module(target)
    except EdgekitError:
        raise
    except SystemExit as exc:  # sys.exit() at import: edgekit must not exit 0 with nothing done
        raise EdgekitError(
            f"importing {what} {target!r} called sys.exit({exc.code!r})", hint="remove the exit from the module"
        ) from None
    except Exception as exc:
        raise EdgekitError(
            f"importing {what} {target!r} failed: {type(exc).__name__}: {exc}", hint=_import_hint(exc, target, forms)
        ) from exc
    fn = getattr(module, func, None)
    if not callable(fn):
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None))]
        close = difflib.get_close_matches(func, names, n=1)
        hint = f"did you mean {target}:{close[0]}?" if close else f"use {forms}"
        raise error(f"{target!r} has no function {func!r}", hint=hint)
    return fn


@contextlib.contextmanager
def _on_sys_path(folder: str | None) -> Iterator[None]:
    if not folder or folder in sys.path:
        yield
        return
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


def _import_hint(exc: Exception, target: str, forms: str) -> str | None:
    if not isinstance(exc, ModuleNotFoundError):
        return None
    missing = exc.name or ""
    if target.endswith(".py") or not (target == missing or target.startswith(missing + ".")):
        # The user's module was found; something it imports was not.
        return (
            f"{target} imports {missing!r}, which is not installed here: pip install it, or put the folder that "
            "holds it on PYTHONPATH (a module beside a file.py is found)"
        )
    top = target.partition(".")[0]
    return (
        f"{top!r} is not importable from here: run from the folder "
        "that holds it, set PYTHONPATH, or use path/to/file.py:function"
    )


def _suggest_file(path: Path) -> str | None:
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        return None
    try:
        near = difflib.get_close_matches(path.name, [p.name for p in folder.iterdir() if p.suffix == ".py"], n=1)
    except OSError:
        return None
    return f"did you mean {folder / near[0]}?" if near else None


# ---- code a manifest names -----------------------------------------------------------------------
def state_dir() -> Path:
    """Where this user's edgekit keeps what it must not keep in a bundle: $EDGEKIT_STATE_DIR,
    else $XDG_STATE_HOME/edgekit, else ~/.local/state/edgekit."""
    if os.environ.get("EDGEKIT_STATE_DIR"):
        return Path(os.environ["EDGEKIT_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "edgekit"


def _record_path(root: Path) -> Path:
    key = hashlib.sha256(os.fsencode(Path(root).resolve())).hexdigest()[:32]  # any path: bytes, not UTF-8
    return state_dir() / "exported" / f"{key}.json"


def is_own(ref: str) -> bool:
    """edgekit's built-in factories (never foreign code)."""
    return ref.startswith(_OWN) and ".py:" not in ref


def code_origin(ref: str) -> dict[str, Any]:
    """What export records about code ``ref``: the file's sha256 (file.py refs) and, for a package
    imported from a folder, that folder (so a later command can import it from anywhere)."""
    target = ref.rpartition(":")[0]
    if target.endswith(".py"):
        path = Path(target)
        return {"sha256": sha256_file(path) if path.is_file() else None, "path": None}
    try:  # a top-level name is found without running anything
        spec = importlib.util.find_spec(target.partition(".")[0])
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not spec.has_location:
        return {"sha256": None, "path": None}
    where = Path(spec.origin)
    top = where.parent.parent if where.name == "__init__.py" else where.parent
    return {"sha256": None, "path": str(top.resolve())}


def remember_export(root: Path, refs: Iterable[str | None]) -> None:
    """Record, outside the bundle, that this user exported ``root`` naming the code ``refs``. A
    record that cannot be written only means later commands ask for --trust-code."""
    code = {ref: code_origin(ref) for ref in refs if ref and not is_own(ref)}
    path = _record_path(root)
    try:
        if not code:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"bundle": str(Path(root).resolve()), "code": code}, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass


def forget_bundle(root: Path) -> None:
    """A bundle replaced by something this user did not export (``unpack``): its record goes.
    Called after unpack's swap, so it never raises (a path it cannot resolve has no record)."""
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        _record_path(root).unlink(missing_ok=True)


def _recorded(root: Path) -> dict[str, Any]:
    try:
        doc = json.loads(_record_path(root).read_text())
        return doc["code"] if isinstance(doc, dict) and doc.get("bundle") == str(Path(root).resolve()) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _inside(path: Path, root: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(Path(root).resolve())
    except OSError:
        return False


def _package_folders(target: str, extra: str | None) -> list[Path]:
    """Where the import system would find ``target``'s top-level package, found without running it."""
    with _on_sys_path(extra):
        try:
            spec = importlib.util.find_spec(target.partition(".")[0])
        except (ImportError, ValueError):
            return []
    if spec is None:
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] + ([Path(spec.origin)] if spec.origin else [])


def bundle_code_problem(root: Path, ref: str, recorded_sha256: str | None = None) -> str | None:
    """Why code ``ref`` named by the manifest of bundle ``root`` may not run without --trust-code
    (None: it may)."""
    if is_own(ref):
        return None
    target = ref.rpartition(":")[0]
    entry = _recorded(root).get(ref)
    if target.endswith(".py"):
        path = Path(target)
        if _inside(path, root):
            return "it is a file inside the bundle folder"
        if not isinstance(entry, dict):
            return "the bundle was not exported by you here (copied, unpacked or edited)"
        if not path.is_file():
            return None  # importing says the file is missing
        now = sha256_file(path)
        was = {entry.get("sha256"), recorded_sha256} - {None}
        if was and was != {now}:
            return f"the file changed since export (sha256 {sorted(was)[0][:12]}… recorded, {now[:12]}… now)"
        return None
    if not isinstance(entry, dict):
        return "the bundle was not exported by you here (copied, unpacked or edited)"
    if any(_inside(p, root) for p in _package_folders(target, entry.get("path"))):
        return "its module is inside the bundle folder"
    return None


def load_bundle_callable(
    root: Path,
    ref: str,
    what: str,
    recorded_sha256: str | None = None,
    forms: str = FORMS,
    error: type[EdgekitError] = UsageError,
) -> Callable:
    """``load_callable`` for code the manifest of bundle ``root`` names: refused in one line
    (naming the code and --trust-code) unless it passes ``bundle_code_problem`` or the user gave
    --trust-code."""
    problem = bundle_code_problem(root, ref, recorded_sha256)
    if problem and not TRUST_CODE.get():
        raise EdgekitError(
            f"bundle {root} names {what} {ref!r} (Python code edgekit would run), but {problem}",
            hint="pass --trust-code if you trust that code"
            + (", or re-export the bundle" if "changed" in problem else ""),
        )
    entry = _recorded(root).get(ref)
    return load_callable(ref, what, forms, error, search_path=entry.get("path") if isinstance(entry, dict) else None)
