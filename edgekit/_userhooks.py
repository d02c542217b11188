"""Import a user's ``package.module:function`` or ``path/to/file.py:function``.

THIS RUNS USER CODE: the module is imported (a file is executed). Used for model factories
(`edgekit export`) and quality-metric hooks (`edgekit check --metric`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Callable

from edgekit.errors import EdgekitError, UsageError

FORMS = "package.module:function or path/to/file.py:function"


def load_callable(ref: str, what: str, forms: str = FORMS, error: type[EdgekitError] = UsageError) -> Callable:
    """The function ``ref`` names; ``what`` ("model factory", "metric hook") words the errors;
    ``error`` is the type raised for a malformed or missing reference (``forms`` in its hint)."""
    target, sep, func = ref.rpartition(":")
    if not sep or not target or not func:
        raise error(f"{what} {ref!r} is not module:function", hint=f"use {forms}")
    try:
        if target.endswith(".py"):
            path = Path(target)
            if not path.is_file():
                raise error(f"{what} file {target!r} does not exist", hint=f"use {forms}")
            name = f"edgekit_user_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[name] = module
            spec.loader.exec_module(module)  # type: ignore[union-attr]  # runs the user's code
        else:
            module = importlib.import_module(target)
    except EdgekitError:
        raise
    except SystemExit as exc:  # sys.exit() at import: edgekit must not exit 0 with nothing done
        raise EdgekitError(f"importing {what} {target!r} called sys.exit({exc.code!r})", hint="remove the exit from the module") from None
    except Exception as exc:
        hint = f"use {forms}" if isinstance(exc, ModuleNotFoundError) else None
        raise EdgekitError(f"importing {what} {target!r} failed: {type(exc).__name__}: {exc}", hint=hint) from exc
    fn = getattr(module, func, None)
    if not callable(fn):
        raise error(f"{target!r} has no function {func!r}", hint=f"use {forms}")
    return fn
