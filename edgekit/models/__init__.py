"""Where models come from: the built-in demo names, or a user factory ``module:function``.

Importing this package imports no torch; building a model does.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from pathlib import Path

from edgekit._deps import require
from edgekit._userhooks import load_bundle_callable, load_callable
from edgekit.bundle import Bundle, sha256_file
from edgekit.errors import EdgekitError
from edgekit.spec import ModelSpec

# Built-in names resolve through the same factory path as user models.
BUILTIN: dict[str, str] = {
    "masked-demo": "edgekit.models.demo:masked_demo",
    "flow-demo": "edgekit.models.demo:flow_demo",
    "ar-demo": "edgekit.models.demo:ar_demo",
}

_FORMS = "a built-in name (" + ", ".join(BUILTIN) + "), path/to/file.py:function or package.module:function"


def _load_factory(ref: str) -> Callable[..., ModelSpec]:
    _check_form(ref)
    return load_callable(ref, "model factory", _FORMS, EdgekitError)


def _check_form(ref: str) -> None:
    if ":" not in ref:
        close = difflib.get_close_matches(ref, list(BUILTIN), n=1)
        raise EdgekitError(
            f"model {ref!r} is not a known model", hint=f"did you mean {close[0]}?" if close else f"use {_FORMS}"
        )


def resolve_source(ref: str) -> dict[str, str | None]:
    """Where ``ref`` comes from, as the manifest records it: {"source", "source_sha256"}.

    ``path/to/file.py:function`` becomes an absolute path (and the file's sha256), so the torch
    runtime can rebuild the module from any working directory; built-in names and
    ``package.module:function`` stay as given (sha256 None: the import system finds them)."""
    target, sep, func = ref.rpartition(":")
    if sep and target.endswith(".py") and Path(target).is_file():
        path = Path(target).resolve()
        return {"source": f"{path}:{func}", "source_sha256": sha256_file(path)}
    return {"source": ref, "source_sha256": None}


def load_spec(ref: str, batch: int | None = None) -> ModelSpec:
    """Resolve ``ref`` to a ``ModelSpec``. ``batch`` is passed to the factory as ``batch=`` when
    given (a factory that takes no ``batch`` then fails with a clear message)."""

    require("torch")  # every factory builds a torch module; say how to install it up front
    return _build(_load_factory(BUILTIN.get(ref, ref)), ref, batch)


def load_bundle_spec(bundle: Bundle, batch: int | None = None) -> ModelSpec:
    """The ``ModelSpec`` of ``bundle``'s recorded model source (``--runtime torch``, a fused graph
    added later). That source is code the manifest names: it runs only when this user exported
    the bundle here and the file is unchanged, or with --trust-code (``_userhooks``)."""
    require("torch")
    ref = bundle.source or bundle.name
    target = BUILTIN.get(ref, ref)
    _check_form(target)
    factory = load_bundle_callable(bundle.root, target, "model source", bundle.source_sha256, _FORMS, EdgekitError)
    return _build(factory, ref, batch)


def _build(factory: Callable[..., ModelSpec], ref: str, batch: int | None) -> ModelSpec:
    kwargs = {}
    if batch is not None:
        if batch < 1:
            raise EdgekitError(f"--batch {batch} is invalid; it must be >= 1")
        params = inspect.signature(factory).parameters
        if "batch" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise EdgekitError(
                f"factory {ref!r} takes no 'batch' argument", hint="drop --batch or add batch=1 to the factory"
            )
        kwargs["batch"] = batch
    try:
        spec = factory(**kwargs)
    except EdgekitError:
        raise
    except SystemExit as exc:  # a factory must return a ModelSpec; exiting 0 with no bundle hid the failure
        raise EdgekitError(
            f"model factory {ref!r} called sys.exit({exc.code!r}) instead of returning a ModelSpec"
        ) from None
    except Exception as exc:
        raise EdgekitError(f"model factory {ref!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(spec, ModelSpec):
        raise EdgekitError(
            f"model factory {ref!r} returned {type(spec).__name__}, not an edgekit.ModelSpec",
            hint="return edgekit.ModelSpec(name=..., kind=..., module=..., inputs=..., outputs=..., meta=...)",
        )
    return spec
