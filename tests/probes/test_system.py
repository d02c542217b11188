from __future__ import annotations

import json

from edgekit.probes.system import compare_states, nvml_state, system_state

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM) i7-1185G7 @ 3.00GHz
cpu MHz\t\t: 2995.203
flags\t\t: fpu sse avx2 avx512f avx512_vnni avx512vl xsave

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM) i7-1185G7 @ 3.00GHz
"""

NVPMODEL_Q = """NVPM WARN: fan mode is not set!
NV Power Mode: MAXN
0
"""


def commands(argv):
    if list(argv) == ["nvpmodel", "-q"]:
        return NVPMODEL_Q
    if list(argv) == ["vcgencmd", "get_throttled"]:
        return "throttled=0x50005\n"
    raise FileNotFoundError(argv[0])


X86_HOST = {
    "/proc/cpuinfo": CPUINFO,
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "performance",
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": 2400000,
    "/sys/devices/system/cpu/cpu1/topology/core_id": 1,  # cpu1 has no cpufreq directory
    "/sys/class/thermal/thermal_zone0/type": "x86_pkg_temp",
    "/sys/class/thermal/thermal_zone0/temp": 45000,
    "/sys/class/thermal/thermal_zone10/type": "acpitz",
    "/sys/class/thermal/thermal_zone10/temp": "",  # a disabled sensor reads empty
}
JETSON_HOST = {
    "/proc/device-tree/model": "NVIDIA Jetson Orin NX Engineering Reference Developer Kit\x00",
    "/sys/class/devfreq/17000000.ga10b/device/load": 250,
}
PI_HOST = {"/proc/device-tree/model": "Raspberry Pi 5 Model B Rev 1.0\x00"}


def test_cpu_isa_reads_the_int8_and_bf16_features():
    from edgekit.host import cpu_isa

    sapphire = "flags\t: fpu avx2 avx512f avx512_vnni avx_vnni avx512_bf16 amx_tile amx_int8 amx_bf16 sse4_2\n"
    assert cpu_isa(sapphire) == [
        "avx2",
        "avx512f",
        "avx512_vnni",
        "avx_vnni",
        "avx512_bf16",
        "amx_tile",
        "amx_int8",
        "amx_bf16",
    ]
    assert cpu_isa("Features\t: fp asimd asimddp i8mm bf16 sve\n") == ["asimd", "asimddp", "i8mm", "bf16", "sve"]
    assert cpu_isa("processor : 0\n") == []


def test_system_state_of_an_x86_host_with_a_gpu(write_tree, fake_nvml):
    state = system_state(write_tree(X86_HOST), run_command=commands, pynvml=fake_nvml())
    json.dumps(state)  # JSON-ready
    assert state["cpu"] == {
        "model": "Intel(R) Core(TM) i7-1185G7 @ 3.00GHz",
        "cores": 2,
        "board": None,
        "isa": ["avx2", "avx512f", "avx512_vnni"],
    }
    assert state["cpufreq"]["cpu0"] == {"governor": "performance", "cur_mhz": 2400.0}
    assert state["cpufreq"]["cpu1"]["governor"] is None and "no cpufreq" in state["cpufreq"]["cpu1"]["reason"]
    assert [z["zone"] for z in state["thermal"]] == ["thermal_zone0", "thermal_zone10"]
    assert state["thermal"][0]["temp_c"] == 45.0
    assert state["thermal"][1]["temp_c"] is None and state["thermal"][1]["reason"]
    assert state["nvml"]["sm_mhz"] == 1695 and state["nvml"]["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]
    assert "jetson" not in state and "rpi" not in state  # a runner alone is no evidence of either board


def test_system_state_of_a_jetson(write_tree, fake_nvml):
    state = system_state(write_tree(JETSON_HOST), run_command=commands, pynvml=fake_nvml(gpus=0, init_error="x"))
    assert state["cpu"]["board"] == "NVIDIA Jetson Orin NX Engineering Reference Developer Kit"
    assert state["jetson"] == {"nvpmodel": {"mode": "MAXN", "id": 0}, "gpu_load_percent": 25.0}
    assert "nvml" not in state and "rpi" not in state


def test_system_state_of_a_pi(write_tree):
    state = system_state(write_tree(PI_HOST), run_command=commands, pynvml=None)
    assert state["rpi"]["throttled"]["raw"] == "0x50005"
    assert state["rpi"]["throttled"]["now"] == ["under-voltage detected", "currently throttled"]


def test_system_state_without_optional_parts(tmp_path, fake_nvml):
    state = system_state(tmp_path, run_command=commands, pynvml=fake_nvml(init_error="no driver"))
    assert set(state) == {"cpu", "cpufreq", "thermal"}
    assert state["cpufreq"] == {} and state["thermal"] == []


def test_nvml_state_decodes_reasons(fake_nvml):
    nvml = fake_nvml()
    nvml.throttle_mask = 0x40 | 0x8
    s = nvml_state(nvml)
    assert s["throttle_reasons"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert (s["graphics_mhz"], s["mem_mhz"], s["temp_c"]) == (1695, 6251, 61)


def test_compare_states_flags_what_moves_latency(write_tree, fake_nvml):
    before = system_state(write_tree({**X86_HOST, **JETSON_HOST}), run_command=commands, pynvml=fake_nvml())
    before["rpi"] = system_state(write_tree(PI_HOST), run_command=commands)["rpi"]
    after = json.loads(json.dumps(before))
    assert set(compare_states(before, after)) == {
        "GPU clocks limited: sw_power_cap",
        "Raspberry Pi throttled now: under-voltage detected, currently throttled (0x50005)",
    }
    before["rpi"]["throttled"] = {"raw": "0x0", "now": [], "since_boot": []}
    after["rpi"]["throttled"] = {"raw": "0x40000", "now": [], "since_boot": ["throttling has occurred"]}
    after["cpufreq"]["cpu0"] = {"governor": "powersave", "cur_mhz": 1800.0}
    after["thermal"][0]["temp_c"] = 71.5
    after["jetson"]["nvpmodel"]["mode"] = "15W"
    after["nvml"]["throttle_reasons"] = ["gpu_idle"]
    after["nvml"]["sm_mhz"] = 1200
    flags = compare_states(before, after)
    assert "cpu0 governor changed performance -> powersave" in flags
    assert any("CPU frequency changed" in f and "cpu0 2400->1800 MHz" in f for f in flags)
    assert any("thermal_zone0 (x86_pkg_temp) rose 45.0 -> 71.5" in f for f in flags)
    assert "Jetson power mode changed MAXN -> 15W" in flags
    assert "Raspberry Pi during the run: throttling has occurred" in flags
    assert "GPU SM clock dropped 1695 -> 1200 MHz" in flags
    assert not any("GPU clocks limited" in f for f in flags)  # idle is not throttling


def test_this_host_state_is_json_and_says_why_when_missing():
    state = system_state()
    json.dumps(state)
    assert state["cpu"]["cores"] and state["cpu"]["cores"] >= 1
    for entry in state["cpufreq"].values():
        assert entry["cur_mhz"] is not None or entry.get("reason")
