"""Qualcomm AI Hub's own Python client (``qai-hub``), imported only when a function runs: whether
a client is configured on this host, one client object, calls whose prints stay off stdout and
whose errors are one line, devices by name, and the client's result formats read into figures.

The client reads its API token from ``~/.qai_hub/client.ini`` (written by ``qai-hub configure``;
``$QAIHUB_CLIENT_INI`` names another file). For CI, where no file exists, edgekit also takes the
token from ``$QAI_HUB_API_TOKEN`` and hands it to ``qai_hub.Client(config=ClientConfig(...))``.
"""

from __future__ import annotations

import configparser
import contextlib
import difflib
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError, TargetUnavailable, UsageError

TOKEN_ENV = "QAI_HUB_API_TOKEN"  # edgekit's: the client itself only reads its config file
CONFIG_ENV = "QAIHUB_CLIENT_INI"  # the client's own: the config file to read instead of the default
DEFAULT_CONFIG = "~/.qai_hub/client.ini"
SETUP = (
    f"run `qai-hub configure --api_token TOKEN` (writes {DEFAULT_CONFIG}), or export {TOKEN_ENV}=TOKEN; "
    "tokens: https://aihub.qualcomm.com (Settings)"
)
# The fields the client reads from the [api] section (api_utils.load_api_config_from_file).
CONFIG_FIELDS = ("api_token", "api_url", "web_url")


@dataclass(frozen=True)
class Configuration:
    """Whether this host has an AI Hub client configured, and from where."""

    configured: bool
    source: str | None  # "$QAI_HUB_API_TOKEN" or the config file the client reads
    config_file: str  # the file the client would read
    problem: str | None  # why not configured (None when it is)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def configuration(env: Mapping[str, str] | None = None) -> Configuration:
    """Read without importing the client or reaching the network: the token variable, else the
    client's config file (its ``[api]`` section must have what the client reads)."""
    env = os.environ if env is None else env
    path = Path(os.path.expanduser(env.get(CONFIG_ENV) or DEFAULT_CONFIG))
    if env.get(TOKEN_ENV, "").strip():
        return Configuration(True, f"${TOKEN_ENV}", str(path), None)
    if not path.is_file():
        return Configuration(False, None, str(path), f"no {path} and no ${TOKEN_ENV}")
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
    except (configparser.Error, OSError, UnicodeDecodeError) as exc:
        return Configuration(False, None, str(path), f"{path} is not a readable config file ({type(exc).__name__})")
    missing = [k for k in CONFIG_FIELDS if not (parser.has_option("api", k) and parser.get("api", k).strip())]
    if missing:
        return Configuration(False, None, str(path), f"{path} has no [api] {', '.join(missing)}")
    return Configuration(True, str(path), str(path), None)


def qai_hub() -> ModuleType:
    """The client module (exit 3 with ``pip install 'edgekit[aihub]'`` when it is missing)."""
    return require("qai_hub")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The client prints progress, upload bars and deprecation notes on stdout, which belongs to
    ``--json``'s one document: they go to stderr."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with the client's prints on stderr and its errors as one line."""
    hub = qai_hub()
    try:
        with quiet():
            return fn(*args, **kwargs)
    except hub.Error as exc:
        raise EdgekitError(
            f"AI Hub: {what}: {one_line(exc)}", hint="see https://workbench.aihub.qualcomm.com/jobs/"
        ) from None


def one_line(text: Any) -> str:
    """The first non-empty line of a message (AI Hub's failure reasons run to several)."""
    lines = [line.strip(" │|=") for line in str(text).splitlines() if line.strip(" │|=")]
    return (lines[0] if lines else str(text).strip() or "no message")[:300]


def connect() -> Any:
    """A ``qai_hub.Client``: from ``$QAI_HUB_API_TOKEN`` when set, else from the client's config
    file. Not configured here: exit 3 with the line that configures it."""
    conf = configuration()
    if not conf.configured:
        raise TargetUnavailable(f"no Qualcomm AI Hub client is configured on this host ({conf.problem})", hint=SETUP)
    hub = qai_hub()
    token = os.environ.get(TOKEN_ENV, "").strip()
    client = (
        call("configuring the client", hub.Client, config=hub.ClientConfig(api_token=token))
        if token
        else call("configuring the client", hub.Client)
    )
    call(
        "reading the client configuration", client.set_verbose, False
    )  # no status bars of its own: edgekit prints progress
    return client


def find_device(client: Any, name: str) -> Any:
    """The AI Hub ``Device`` named ``name`` (with its OS and attributes); an unknown name is one
    error with the closest names AI Hub has."""
    found = call(f"looking up device {name!r}", client.get_devices, name=name)
    if found:
        return found[0]
    every = [d.name for d in call("listing devices", client.get_devices)]
    close = difflib.get_close_matches(name, every, n=3, cutoff=0.4)
    raise UsageError(
        f"AI Hub has no device named {name!r}" + (f"; closest: {', '.join(close)}" if close else ""),
        hint='list them with `qai-hub list-devices` (names are exact, e.g. "Samsung Galaxy S24 (Family)")',
    )


def chipset_of(device: Any) -> str | None:
    """``qualcomm-snapdragon-8gen3`` from a device's ``chipset:`` attribute (None when it has none)."""
    for attribute in device.attributes or ():
        if attribute.startswith("chipset:qualcomm-"):
            return attribute.removeprefix("chipset:")
    return None


def model_metadata(model: Any) -> dict[str, str]:
    """A compiled model's metadata by the client's key names (``QAIRT_SDK_VERSION``,
    ``QNN_CONTEXT_BIN_HEXAGON_VERSION``, ``QNN_MODEL_GRAPH_NAMES``, ...)."""
    meta = call("reading the compiled model's metadata", lambda: model.metadata) or {}
    return {getattr(k, "name", str(k)): str(v) for k, v in meta.items()}


# ---- result formats ------------------------------------------------------------------------------
def profile_figures(profile: Mapping[str, Any]) -> dict[str, Any]:
    """Figures of ``InferenceJob.download_profile()``'s dict: ``execution_summary`` (times in
    microseconds, memory in bytes, ranges as [lower, upper]) and ``execution_detail`` (one entry
    per op with its ``compute_unit``: NPU, GPU or CPU)."""
    summary = profile.get("execution_summary") or {}
    detail = profile.get("execution_detail") or []
    us = lambda v: None if v is None else float(v) / 1000.0  # noqa: E731  (microseconds -> ms)
    times = [float(t) / 1000.0 for t in summary.get("all_inference_times") or []]
    peak = summary.get("inference_memory_peak_range")
    units = Counter(str(op.get("compute_unit", "UNSPECIFIED")) for op in detail)
    total = sum(units.values())
    off_npu = [
        {"name": op.get("name"), "type": op.get("type"), "compute_unit": op.get("compute_unit")}
        for op in detail
        if op.get("compute_unit") != "NPU"
    ]
    return {
        "per_call_ms": us(summary.get("estimated_inference_time")),  # AI Hub's own figure per inference
        "per_call": _stats(times),  # every measured iteration on the device
        "peak_memory_bytes": list(peak) if peak else None,  # [lower, upper] during inference
        "estimated_peak_memory_bytes": summary.get("estimated_inference_peak_memory"),
        "first_load_ms": us(summary.get("first_load_time")),
        "warm_load_ms": us(summary.get("warm_load_time")),
        "ops": {
            "total": total,
            **{u: units.get(u, 0) for u in ("NPU", "GPU", "CPU")},
            **{u: n for u, n in units.items() if u not in ("NPU", "GPU", "CPU")},
        },
        "npu_share": units.get("NPU", 0) / total if total else None,
        "off_npu": off_npu[:20],
    }


def _stats(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "n": len(arr),
        "median_ms": float(np.median(arr)),
        "p90_ms": float(np.percentile(arr, 90)),
        "min_ms": float(arr.min()),
        "max_ms": float(arr.max()),
    }


def device_feeds(feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> dict[str, list[np.ndarray]]:
    """An inference job's dataset from per-call feeds: ``{input: [one array per call]}`` in the
    graph's input order (the dataset's schema is ordered). int64 goes as int32: edgekit compiles
    with ``--truncate_64bit_io``, which makes the device graph's int64 IO int32."""
    out: dict[str, list[np.ndarray]] = {}
    for name in names:
        out[name] = [
            np.ascontiguousarray(f[name].astype(np.int32) if f[name].dtype == np.int64 else f[name]) for f in feeds
        ]
    return out


def device_outputs(
    data: Mapping[str, Sequence[np.ndarray]], names: Sequence[str], calls: int
) -> list[dict[str, np.ndarray]]:
    """Per-call outputs from ``InferenceJob.download_output_data()``'s ``{name: [one array per
    sample]}``: by name when the device kept the graph's output names, else in the graph's output
    order (compiled graphs may name them ``output_0``, ...); float16 outputs as float32."""
    keys = list(data)
    by_name = all(n in data for n in names)
    if not by_name and len(keys) != len(names):
        raise EdgekitError(f"AI Hub returned outputs {keys}; the bundle's graph has {list(names)}")
    columns = {n: list(data[n] if by_name else data[keys[i]]) for i, n in enumerate(names)}
    if any(len(v) != calls for v in columns.values()):
        raise EdgekitError(
            f"AI Hub returned {[len(v) for v in columns.values()]} samples per output for {calls} inputs"
        )
    return [
        {
            n: np.asarray(columns[n][i], dtype=np.float32)
            if np.asarray(columns[n][i]).dtype.kind == "f"
            else np.asarray(columns[n][i])
            for n in names
        }
        for i in range(calls)
    ]
