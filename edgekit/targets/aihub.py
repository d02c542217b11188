"""The ``[aihub]`` table of a Snapdragon target: the Qualcomm AI Hub devices that stand for it
(hosted phones, laptops and boards of the target's SoC) and the extra compile options. Data
only, as the rest of ``targets``."""

from __future__ import annotations

from dataclasses import dataclass

from edgekit.errors import UsageError


@dataclass(frozen=True)
class AihubSettings:
    # AI Hub device names (`qai-hub list-devices`), e.g. "Samsung Galaxy S24 (Family)": the first
    # is the one `edgekit build --runtime aihub` compiles for; profile and check take any of them.
    devices: tuple[str, ...] = ()
    # The SoC's AI Hub chipset attribute ("qualcomm-snapdragon-8gen3"): a context binary compiled
    # for one device of that chipset runs on every other one.
    chipset: str = ""
    # Extra compile options appended to edgekit's own (`--target_runtime ...`), e.g.
    # "--truncate_64bit_tensors" for a graph with int64 tensors inside.
    compile_options: str = ""


def check_aihub(a: AihubSettings, used: bool, source: str) -> None:
    """One clear error for a bad ``[aihub]`` value; a target that lists aihub names a device."""
    if any(not d.strip() for d in a.devices):
        raise UsageError(f'target file {source}: aihub.devices has an empty name; e.g. ["Samsung Galaxy S24 (Family)"]')
    if used and not a.devices:
        raise UsageError(
            f"target file {source}: a target that lists runtime aihub needs aihub.devices "
            "(AI Hub device names, see `qai-hub list-devices`)"
        )
    if a.compile_options and "--target_runtime" in a.compile_options:
        raise UsageError(
            f"target file {source}: aihub.compile_options must not set --target_runtime "
            "(edgekit compiles a QNN context binary, or DLCs it links into one)"
        )
