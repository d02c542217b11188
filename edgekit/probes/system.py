"""System state logged with every run: CPU, frequencies, temperatures, power modes, throttling.

``system_state`` is taken before and after a measurement; ``compare_states`` says what changed
in ways that move latency (frequency drops, throttling, a power-mode switch). Anything a host
does not expose is ``None`` with a reason, never omitted silently.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from edgekit.host import cpu_identity
from edgekit.probes._sysfs import CommandRunner, read_int, read_text, run_command, under
from edgekit.probes.power.jetson import gpu_load, parse_nvpmodel
from edgekit.probes.power.nvml import UnmappedGpu, cuda_to_nvml, load_pynvml
from edgekit.probes.power.rpi import THROTTLED_COMMAND, parse_throttled

CPU_DIR = "/sys/devices/system/cpu"
THERMAL_DIR = "/sys/class/thermal"
# A CPU whose clock moved by more than this between before and after is flagged.
FREQ_CHANGE = 0.10
# Temperatures rising by more than this many °C over a run are flagged.
TEMP_RISE_C = 10.0

# NVML clock event (throttle) reason bits; idle and application-clock settings are not throttling.
NVML_THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
BENIGN_NVML_REASONS = {"gpu_idle", "applications_clocks_setting", "display_clock_setting"}


def _cpu_info(root: str | Path) -> dict[str, Any]:
    return cpu_identity(root)


def _cpufreq(root: str | Path) -> dict[str, Any]:
    cpus = sorted(under(root, CPU_DIR).glob("cpu[0-9]*"), key=lambda p: int(p.name[3:]))
    out: dict[str, Any] = {}
    for cpu in cpus:
        freq = cpu / "cpufreq"
        if not freq.is_dir():
            out[cpu.name] = {"governor": None, "cur_mhz": None, "reason": "no cpufreq in sysfs (VMs often hide it)"}
            continue
        entry: dict[str, Any] = {}
        try:
            entry["governor"] = read_text(freq / "scaling_governor")
        except OSError as exc:
            entry["governor"], entry["reason"] = None, f"scaling_governor unreadable: {exc.strerror or exc}"
        try:
            entry["cur_mhz"] = read_int(freq / "scaling_cur_freq") / 1000.0  # sysfs is kHz
        except (OSError, ValueError) as exc:
            entry["cur_mhz"] = None
            entry.setdefault("reason", f"scaling_cur_freq unreadable: {exc}")
        out[cpu.name] = entry
    return out


def _thermal(root: str | Path) -> list[dict[str, Any]]:
    zones = sorted(under(root, THERMAL_DIR).glob("thermal_zone*"), key=lambda p: int(p.name[12:] or 0))
    out = []
    for z in zones:
        entry: dict[str, Any] = {"zone": z.name}
        try:
            entry["type"] = read_text(z / "type")
        except OSError:
            entry["type"] = None
        try:
            entry["temp_c"] = read_int(z / "temp") / 1000.0  # millidegrees
        except (OSError, ValueError) as exc:
            # Some zones (disabled sensors) answer EINVAL/ENODATA on read.
            entry["temp_c"], entry["reason"] = None, str(exc)
        out.append(entry)
    return out


def _jetson(root: str | Path, board: str | None, run: CommandRunner | None) -> dict[str, Any] | None:
    load = gpu_load(root)
    if load is None and not under(root, "/etc/nv_tegra_release").exists() and "Jetson" not in (board or ""):
        return None
    nvpmodel: dict[str, Any]
    if run is None and shutil.which("nvpmodel") is None:
        nvpmodel = {"mode": None, "id": None, "reason": "nvpmodel not on PATH"}
    else:
        try:
            nvpmodel = parse_nvpmodel((run or run_command)(["nvpmodel", "-q"]))
        except Exception as exc:  # noqa: BLE001 - needs root on some releases
            nvpmodel = {"mode": None, "id": None, "reason": f"nvpmodel -q failed: {exc}"}
    return {"nvpmodel": nvpmodel, "gpu_load_percent": load}


def _rpi(board: str | None, run: CommandRunner | None) -> dict[str, Any] | None:
    if "Raspberry Pi" not in (board or ""):
        return None
    if run is None and shutil.which("vcgencmd") is None:
        return {"throttled": None, "reason": "vcgencmd not on PATH"}
    try:
        return {"throttled": parse_throttled((run or run_command)(THROTTLED_COMMAND))}
    except Exception as exc:  # noqa: BLE001
        return {"throttled": None, "reason": f"vcgencmd get_throttled failed: {exc}"}


def nvml_state(pynvml: Any, index: int = 0) -> dict[str, Any]:
    """Clocks (MHz), temperature and throttle reasons of one GPU through an initialised NVML."""
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    state: dict[str, Any] = {"index": index}
    for key, clock in (("graphics_mhz", 0), ("sm_mhz", 1), ("mem_mhz", 2)):  # NVML_CLOCK_*
        try:
            state[key] = int(pynvml.nvmlDeviceGetClockInfo(h, clock))
        except Exception:  # noqa: BLE001
            state[key] = None
    try:
        state["temp_c"] = int(pynvml.nvmlDeviceGetTemperature(h, 0))  # NVML_TEMPERATURE_GPU
    except Exception:  # noqa: BLE001
        state["temp_c"] = None
    # Renamed "clocks event reasons" in newer drivers; the old name stays as an alias.
    getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    try:
        mask = int(getter(h)) if getter else None
    except Exception:  # noqa: BLE001
        mask = None
    state["throttle_reasons"] = None if mask is None else [n for bit, n in NVML_THROTTLE_REASONS.items() if mask & bit]
    return state


def _nvml(pynvml: Any) -> dict[str, Any] | None:
    try:
        nvml = load_pynvml(pynvml)
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no package or no driver: simply not an NVIDIA host
        return None
    try:
        index, _ = cuda_to_nvml(nvml, 0)  # the GPU a decode's cuda:0 is, not NVML's first
    except UnmappedGpu as exc:
        return {"index": None, "reason": str(exc)}
    except Exception:  # noqa: BLE001 - no GPU
        return None
    try:
        return nvml_state(nvml, index)
    except Exception:  # noqa: BLE001 - no package, no driver or no GPU: simply not an NVIDIA host
        return None


def system_state(
    root: str | Path = "/", *, run_command: CommandRunner | None = None, pynvml: Any = None
) -> dict[str, Any]:
    """A JSON-ready snapshot: ``cpu``, ``cpufreq`` (per CPU), ``thermal``, and where present
    ``jetson`` (nvpmodel mode, GPU load), ``rpi`` (throttled bits), ``nvml`` (clocks, reasons)."""
    cpu = _cpu_info(root)
    state: dict[str, Any] = {"cpu": cpu, "cpufreq": _cpufreq(root), "thermal": _thermal(root)}
    optional = (
        ("jetson", _jetson(root, cpu["board"], run_command)),
        ("rpi", _rpi(cpu["board"], run_command)),
        ("nvml", _nvml(pynvml)),
    )
    for key, value in optional:
        if value is not None:
            state[key] = value
    return state


def compare_states(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Changes between two ``system_state`` snapshots that make a measurement suspect."""
    flags: list[str] = []
    moved = []
    for cpu, b in before.get("cpufreq", {}).items():
        a = after.get("cpufreq", {}).get(cpu, {})
        if b.get("governor") and a.get("governor") and b["governor"] != a["governor"]:
            flags.append(f"{cpu} governor changed {b['governor']} -> {a['governor']}")
        fb, fa = b.get("cur_mhz"), a.get("cur_mhz")
        if fb and fa and abs(fa - fb) / fb > FREQ_CHANGE:
            moved.append(f"{cpu} {fb:.0f}->{fa:.0f} MHz")
    if moved:
        shown = ", ".join(moved[:4]) + (f" and {len(moved) - 4} more" if len(moved) > 4 else "")
        flags.append(f"CPU frequency changed by more than {FREQ_CHANGE:.0%} on {len(moved)} CPU(s): {shown}")
    temps_before = {z["zone"]: z.get("temp_c") for z in before.get("thermal", [])}
    for z in after.get("thermal", []):
        tb, ta = temps_before.get(z["zone"]), z.get("temp_c")
        if tb is not None and ta is not None and ta - tb > TEMP_RISE_C:
            flags.append(f"{z['zone']} ({z.get('type')}) rose {tb:.1f} -> {ta:.1f} °C")
    nb = (before.get("jetson") or {}).get("nvpmodel", {}).get("mode")
    na = (after.get("jetson") or {}).get("nvpmodel", {}).get("mode")
    if nb and na and nb != na:
        flags.append(f"Jetson power mode changed {nb} -> {na}")
    throttled = (after.get("rpi") or {}).get("throttled") or {}
    if throttled.get("now"):
        flags.append(f"Raspberry Pi throttled now: {', '.join(throttled['now'])} ({throttled['raw']})")
    throttled_before = (before.get("rpi") or {}).get("throttled") or {}
    new_since = set(throttled.get("since_boot", [])) - set(throttled_before.get("since_boot", []))
    if new_since:
        flags.append(f"Raspberry Pi during the run: {', '.join(sorted(new_since))}")
    reasons = set((after.get("nvml") or {}).get("throttle_reasons") or []) - BENIGN_NVML_REASONS
    if reasons:
        flags.append(f"GPU clocks limited: {', '.join(sorted(reasons))}")
    gb, ga = (before.get("nvml") or {}).get("sm_mhz"), (after.get("nvml") or {}).get("sm_mhz")
    if gb and ga and (gb - ga) / gb > FREQ_CHANGE:
        flags.append(f"GPU SM clock dropped {gb} -> {ga} MHz")
    return flags
