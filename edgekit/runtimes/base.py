"""The one interface every backend implements, and the feed checks they all share.

Backends subclass ``BaseRuntime`` and override only ``_run_impl`` / ``_close_impl``: state and
input checks live in the public methods (the Polygraphy runner pattern).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from edgekit._sidefiles import external_data_locations
from edgekit.errors import EdgekitError
from edgekit.spec import TensorSpec

log = logging.getLogger(__name__)
# A backend's own class (``with OpenVinoRuntime(...) as rt`` keeps ``rt``'s type: typing.Self is 3.11+).
_SelfRuntime = TypeVar("_SelfRuntime", bound="BaseRuntime")


@runtime_checkable
class Runtime(Protocol):
    """A loaded network with static IO. ``run`` returns arrays the caller may keep until the
    next ``run`` call (backends reuse output buffers across steps; copy to keep longer).

    Everything a stage reads from a runtime is declared here (``BaseRuntime`` has the defaults),
    never probed with ``getattr``. Stages only read these (declared as read-only properties, so a
    backend may hold them as plain attributes of a narrower type, a ``dict`` for a ``Mapping``)."""

    @property
    def name(self) -> str: ...

    @property
    def inputs(self) -> Mapping[str, TensorSpec]: ...

    @property
    def outputs(self) -> Mapping[str, TensorSpec]: ...

    @property
    def device(self) -> str:  # what actually executed: an execution provider or a device name
        ...

    @property
    def warnings(self) -> list[str]:  # e.g. a requested provider that was not available
        ...

    @property
    def settings(self) -> Mapping[str, Any]:
        """Settings read back from the engine as compiled (OpenVINO: threads, streams, performance
        hint, inference precision); {} when the backend has none to report."""
        ...

    @property
    def timing_note(self) -> str | None:
        """Where a latency is not the device's (the Hexagon NPU emulated on x86): said with every
        figure; None when timings are this device's."""
        ...

    @property
    def session_info(self) -> Mapping[str, Any] | None:
        """How the session was made, where creating it costs (QNN compiles the graph): {"seconds":
        to create it, "precompiled": a compiled model/context was loaded instead, optionally
        "compile_seconds_at_build" and "saved_seconds"}; None when there is nothing to say."""
        ...

    @property
    def model_files(self) -> tuple[Path, ...]:
        """The files it loaded (model and external weights, or the engine): what memory reports
        size; () for an in-process module."""
        ...

    @property
    def outputs_stay_valid(self) -> int:
        """How many ``run`` calls an output survives: 2 (double-buffered outputs, ORT's IOBinding)
        lets a loop feed an output straight back as the next input (ping-pong, no copy)."""
        ...

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Runtime: ...

    def __exit__(self, *exc: object) -> None: ...


def can_ping_pong(runtime: Runtime) -> bool:
    """Whether a loop may feed ``runtime``'s outputs straight back as the next run's inputs
    (``outputs_stay_valid`` >= 2); otherwise it copies them into arrays it owns."""
    return runtime.outputs_stay_valid >= 2


def model_files_of(path: str | Path) -> tuple[Path, ...]:
    """A model file and every file it reads beside itself: an ONNX's external weights or QNN
    context binary, an OpenVINO IR's .bin (same name as its .xml); a blob or plan alone."""
    path = Path(path)
    if path.suffix == ".xml" and path.with_suffix(".bin").is_file():
        return (path, path.with_suffix(".bin"))
    if path.suffix != ".onnx" or not path.is_file():
        return (path,)
    return (
        path,
        *sorted(path.parent / name for name in external_data_locations(path) if (path.parent / name).is_file()),
    )


def check_model_file(path: Path, runtime: str) -> None:
    """A model file that exists and is not empty, else one line saying which (before ``runtime``
    reads it)."""
    if not path.is_file():
        raise EdgekitError(f"{runtime}: model file {path} does not exist", hint="check the path, or run edgekit export")
    if path.stat().st_size == 0:
        raise EdgekitError(f"{runtime}: model file {path} is empty (0 bytes)", hint="re-export it (edgekit export)")


def describe(specs: Mapping[str, TensorSpec]) -> str:
    return ", ".join(f"{n}: {s.dtype}{list(s.shape)}" for n, s in specs.items())


def validate_feeds(feeds: Mapping[str, np.ndarray], specs: Mapping[str, TensorSpec], runtime: str) -> None:
    """Raise one clear error when ``feeds`` do not match ``specs`` by name, shape or dtype."""
    missing = [n for n in specs if n not in feeds]
    extra = [n for n in feeds if n not in specs]
    if missing or extra:
        raise EdgekitError(
            f"{runtime}: feeds {sorted(feeds)} do not match the graph inputs "
            f"(missing {missing}, unexpected {extra}); the graph expects {describe(specs)}"
        )
    for name, spec in specs.items():
        arr = feeds[name]
        if not isinstance(arr, np.ndarray):
            raise EdgekitError(f"{runtime}: feed {name!r} is a {type(arr).__name__}, expected a numpy array")
        if tuple(arr.shape) != spec.shape or arr.dtype != np.dtype(spec.dtype):
            raise EdgekitError(
                f"{runtime}: feed {name!r} is {arr.dtype}{list(arr.shape)}, "
                f"expected {spec.dtype}{list(spec.shape)}; the graph expects {describe(specs)}"
            )


class KeyedFeeds(dict[str, np.ndarray]):
    """Feeds whose producer vouches for the content of some arrays with a key: ``content_keys``
    {feed name: a string that names that array's content exactly}, so a memo keys the call
    without reading those arrays' bytes.

    The AR loop's KV cache is the one user: 200 MB a call at 1024 slots, which SHA-256 reads at
    ~1.7 GB/s while the network itself takes ~60 ms (quantize asks each call of a held-out decode
    several times: lockstep, gate, free-running). The loop owns the cache and knows every write
    into it (slot i gets step i's keys and values), so a digest chained over those writes names
    the content exactly. Anything that builds new feeds from these (``dict(feeds)``, ``{**feeds}``)
    gets a plain dict: the keys never outlive the arrays they vouch for, and a runtime that gets a
    plain dict hashes every byte as before."""

    def __init__(self, feeds: Mapping[str, np.ndarray], content_keys: Mapping[str, str]):
        super().__init__(feeds)
        self.content_keys: dict[str, str] = {name: key for name, key in content_keys.items() if name in self}


class BaseRuntime:
    """Shared state and checks; subclasses implement ``_run_impl`` and ``_close_impl``."""

    name = "base"
    outputs_stay_valid = 1
    timing_note: str | None = None
    session_info: Mapping[str, Any] | None = None

    def __init__(self, inputs: Mapping[str, TensorSpec] | None = None, outputs: Mapping[str, TensorSpec] | None = None):
        # Backends that learn their IO only after loading a model set these afterwards.
        self.inputs = dict(inputs or {})
        self.outputs = dict(outputs or {})
        self._closed = False
        # What actually executed (provider/device), filled in by the backend for reports.
        self.device: str = "cpu"
        self.warnings: list[str] = []
        self.settings: Mapping[str, Any] = {}
        self.model_files: tuple[Path, ...] = ()

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._closed:
            raise EdgekitError(f"{self.name}: run() after close()")
        validate_feeds(feeds, self.inputs, self.name)
        return self._run_impl(feeds)

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def close(self) -> None:
        if not self._closed:
            self._close_impl()
            self._closed = True

    def _close_impl(self) -> None:
        pass

    def __enter__(self: _SelfRuntime) -> _SelfRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warn(self, message: str) -> None:
        """Record a warning for the report. The stage's render prints the report's warnings, so
        the log gets it at debug level only (at warning level the user read every one twice)."""
        self.warnings.append(message)
        log.debug(message)


class RuntimeProxy:
    """A ``Runtime`` around another one (timing, recording, comparing): the wrapped runtime's IO,
    device and warnings; ``run`` forwards. Subclasses override ``run`` and keep the loops
    unchanged. ``close`` closes the wrapped runtime unless ``owns_inner`` is False."""

    def __init__(self, inner: Runtime, name: str | None = None, owns_inner: bool = True):
        self.inner = inner
        self.name = name or inner.name
        self._owns_inner = owns_inner

    @property
    def inputs(self) -> Mapping[str, TensorSpec]:
        return self.inner.inputs

    @property
    def outputs(self) -> Mapping[str, TensorSpec]:
        return self.inner.outputs

    @property
    def device(self) -> str:
        return self.inner.device

    @property
    def warnings(self) -> list[str]:
        return self.inner.warnings

    @property
    def settings(self) -> Mapping[str, Any]:
        return self.inner.settings

    @property
    def timing_note(self) -> str | None:
        return self.inner.timing_note

    @property
    def session_info(self) -> Mapping[str, Any] | None:
        return self.inner.session_info

    @property
    def model_files(self) -> tuple[Path, ...]:
        return self.inner.model_files

    @property
    def outputs_stay_valid(self) -> int:
        return self.inner.outputs_stay_valid

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.inner.run(feeds)

    def close(self) -> None:
        if self._owns_inner:
            self.inner.close()

    def __enter__(self) -> RuntimeProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
