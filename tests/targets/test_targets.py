"""Target profiles: the shipped TOML files load with the declared facts, and user files are
checked strictly (unknown keys list the valid ones, wrong types name the key)."""

from __future__ import annotations

import json

import pytest

from edgekit.errors import UsageError
from edgekit.probes.power import CHOICES as POWER_PROBES
from edgekit.targets import DEFAULT_TARGET, OrtSettings, builtin_names, list_targets, load_target, parse_target

SHIPPED = {
    "cpu",
    "arm64-cpu",
    "nvidia-gpu",
    "jetson-orin-nano",
    "jetson-orin-nano-jp60",
    "jetson-agx-orin",
    "jetson-agx-orin-jp60",
    "jetson-xavier",
    "android-arm64",
    "rpi5",
    "intel-cpu",
    "intel-gpu",
    "intel-npu",
    "snapdragon-8-gen-2",
    "snapdragon-8-gen-3",
    "snapdragon-8-elite",
    "snapdragon-x-elite",
    "x86-avx2",
    "x86-avx512-vnni",
    "x86-amx",
}
MINIMAL = 'runtimes = ["ort"]\nprecisions = ["fp32"]\n'


def write(tmp_path, text: str, name: str = "mine.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_targets_load_with_the_default_first():
    targets = list_targets()
    assert {t.name for t in targets} == SHIPPED
    assert targets[0].name == DEFAULT_TARGET == "cpu"
    assert builtin_names()[0] == "cpu"
    for t in targets:
        assert t.source == f"builtin:{t.name}"
        assert t.power_probe in POWER_PROBES
        assert t.install and t.description
        json.dumps(t.to_json())  # JSON-ready for `edgekit targets --json`


def test_cpu_targets_name_the_int8_arithmetic_they_run():
    """The class decides the cpu profile's scheme: bounded weights for x86 without VNNI, full range
    where the int8 dot products are exact; the local cpu target means this host's class."""
    from edgekit.quantize import QuantizeConfig

    assert load_target("cpu").isa == "host"
    for name, isa, scheme in (
        ("x86-avx2", "avx2", "u8s8-pair"),
        ("x86-avx512-vnni", "avx512-vnni", "u8s8"),
        ("x86-amx", "amx", "u8s8"),
        ("rpi5", "arm64-dotprod", "u8s8"),
        ("arm64-cpu", "arm64", "u8s8"),
    ):
        t = load_target(name)
        assert t.isa == isa and t.quantization_profile == "cpu" and t.ort.graph_optimization != "all", name
        cfg = QuantizeConfig(target=name).resolved()
        assert (cfg.isa, cfg.settings.scheme) == (isa, scheme), name


def test_each_target_declares_what_the_issue_asks():
    cpu = load_target("cpu")
    assert cpu.runtimes == ("ort",) and cpu.arch == "host" and cpu.ort.graph_optimization == "all"
    for name in ("arm64-cpu", "rpi5", "android-arm64"):
        t = load_target(name)
        assert t.arch == "aarch64" and t.ort.graph_optimization == "extended", name  # portable across CPUs
    android = load_target("android-arm64")
    assert android.ort.format == "ort" and android.power_probe == "android"
    assert {"NnapiExecutionProvider", "XnnpackExecutionProvider", "QNNExecutionProvider"} <= set(android.ort.providers)
    assert len(android.ort.provider_options) == len(android.ort.providers)
    assert android.lint.supported_ops == "nnapi"
    assert load_target("rpi5").power_probe == "rpi"
    gpu = load_target("nvidia-gpu")
    assert (
        gpu.runtimes == ("trt", "ort") and gpu.ort.providers[0] == "CUDAExecutionProvider" and gpu.power_probe == "nvml"
    )
    for name, cc in (("jetson-orin-nano", "8.7"), ("jetson-agx-orin", "8.7"), ("jetson-xavier", "7.2")):
        t = load_target(name)
        assert t.runtimes[0] == "trt" and t.trt.jetson and t.trt.compute_capability == (cc,)
        assert t.power_probe == "jetson" and t.nvpmodel
    assert load_target("jetson-orin-nano").trt.board == ("Orin Nano",)
    assert load_target("jetson-agx-orin").trt.board == ("AGX Orin",)
    for t in list_targets():
        if t.uses_trt:
            # TensorRT's ITopKLayer requires K < 3840.
            assert t.quantization_profile == "trt" and t.lint.max_topk_k == 3839 and t.lint.supported_ops == "tensorrt"
        elif t.uses_qnn:
            assert t.quantization_profile == "qnn" and t.lint.supported_ops == "qnn"
        else:
            assert t.quantization_profile == "cpu" and t.lint.supported_ops in ("ort", "nnapi", "openvino")
        assert t.lint.static_shapes


# What each JetPack really ships (NVIDIA/TensorRT#2737, #3454 and the JetPack release notes).
JETPACKS = {
    # target: (JetPack, L4T releases it accepts, one it refuses, TensorRT, CUDA, system Python, opset_max)
    "jetson-xavier": ("5.1.x", "35.4.1", "36.3.0", "8.5", "11.4", "3.8", 17),
    "jetson-orin-nano-jp60": ("6.0", "36.3.0", "36.4.3", "8.6", "12.2", "3.10", 17),
    "jetson-agx-orin-jp60": ("6.0", "36.3.0", "36.4.0", "8.6", "12.2", "3.10", 17),
    "jetson-orin-nano": ("6.1, 6.2", "36.4.3", "36.3.0", "10.3", "12.6", "3.10", 20),
    "jetson-agx-orin": ("6.1, 6.2", "36.4.0", "35.4.1", "10.3", "12.6", "3.10", 20),
}


@pytest.mark.parametrize("name", sorted(JETPACKS))
def test_jetson_targets_state_their_jetpack(name):
    jetpack, accepts, refuses, tensorrt, cuda, python, opset_max = JETPACKS[name]
    t = load_target(name).trt
    assert (t.jetpack, t.tensorrt, t.cuda, t.python) == (jetpack, tensorrt, cuda, python)
    assert t.l4t_matches(accepts) and not t.l4t_matches(refuses) and not t.l4t_matches(None)
    target = load_target(name)
    assert target.lint.opset_max == opset_max and jetpack.split(",")[0] in target.description
    if python == "3.10":
        # JetPack 6's TensorRT bindings are for the system Python 3.10: the venv must see them,
        # and pip must not pull a TensorRT over them (no [trt] extra), only the JetPack's cuda-python.
        assert "--system-site-packages" in target.install and "edgekit[trt" not in target.install
        assert f"cuda-python>={cuda},<" in target.install
    else:
        # JetPack 5: bindings for Python 3.8 only, edgekit needs >= 3.10: a documented route.
        assert (
            "python3.10" in target.install
            and "docs/targets.md" in target.install
            and "cuda-python>=11.8,<12" in target.install
        )


def test_jetpack_of_l4t_and_the_targets_for_it():
    from edgekit.targets import jetpack_of, targets_for_l4t

    assert jetpack_of("36.3.0") == "6.0" and jetpack_of("36.4.3") == "6.2" and jetpack_of("35.4.1") == "5.1.2"
    assert jetpack_of("99.0.0") is None
    assert targets_for_l4t("36.3.0", load_target("jetson-orin-nano")) == ["jetson-orin-nano-jp60"]
    assert targets_for_l4t("36.4.3", load_target("jetson-agx-orin-jp60")) == ["jetson-agx-orin"]


def test_user_file_by_path_with_defaults(tmp_path):
    t = load_target(write(tmp_path, MINIMAL + 'description = "my board"\n[lint]\nmemory_budget_mb = 512\n'))
    assert t.name == "mine" and t.description == "my board" and t.lint.memory_budget_mb == 512
    assert t.ort == OrtSettings() and t.source == str(tmp_path / "mine.toml")
    assert load_target(t) is t  # a Target passes through


@pytest.mark.parametrize(
    "text,needle",
    [
        (
            MINIMAL + "runtime_order = 1\n",
            "unknown key 'runtime_order'; valid: name, runtimes, precisions, description, arch",
        ),
        (
            MINIMAL + "[ort]\nprovider = ['CPUExecutionProvider']\n",
            "unknown key 'provider' in [ort]; valid: providers, provider_options, graph_optimization",
        ),
        (MINIMAL + "[lint]\nmax_topk = 5\n", "unknown key 'max_topk' in [lint]; valid: static_shapes, max_topk_k"),
        ('runtimes = "ort"\nprecisions = ["fp32"]\n', "key 'runtimes' must be an array, got str 'ort'"),
        (MINIMAL + "[lint]\nmax_topk_k = 'big'\n", "key 'lint.max_topk_k' must be an integer, got str 'big'"),
        (MINIMAL + "[trt]\njetson = 1\n", "key 'trt.jetson' must be true or false, got int 1"),
        (MINIMAL + "ort = 3\n", "key 'ort' must be a table"),
        (MINIMAL + "[ort]\nprovider_options = [3]\n", "key 'ort.provider_options[0]' must be a table"),
        ('runtimes = ["ort"]\n', "required key 'precisions' is missing"),
        (
            'runtimes = ["tensorflow"]\nprecisions = ["fp32"]\n',
            "runtimes = 'tensorflow' is invalid; valid: ort, trt, openvino",
        ),
        ('runtimes = ["ort"]\nprecisions = ["fp8"]\n', "precisions = 'fp8' is invalid; valid: fp32, fp16, int8, bf16"),
        (MINIMAL + 'power_probe = "wattmeter"\n', "power_probe = 'wattmeter' is invalid; valid: off, auto, nvml"),
        (
            MINIMAL + "[ort]\nproviders = ['A', 'B']\nprovider_options = [{}]\n",
            "ort.provider_options has 1 tables for 2 providers",
        ),
        (MINIMAL + "[lint]\nopset_min = 20\nopset_max = 10\n", "20..10 is not a range"),
        ("runtimes = [\n", "is not valid TOML"),
    ],
)
def test_bad_user_files_say_what_and_where(tmp_path, text, needle):
    with pytest.raises(UsageError) as err:
        load_target(write(tmp_path, text))
    assert needle in str(err.value)
    assert str(tmp_path / "mine.toml") in str(err.value)


def test_unknown_names_list_the_shipped_targets(tmp_path):
    with pytest.raises(
        UsageError,
        match=(
            "target 'jetson-nano' is unknown; valid: cpu, .*rpi5, "
            ".*snapdragon-x-elite, .*x86-avx2.* or a path to a .toml file"
        ),
    ):
        load_target("jetson-nano")
    with pytest.raises(UsageError, match="does not exist"):
        load_target(tmp_path / "missing.toml")


def test_parse_target_names_its_source():
    t = parse_target(MINIMAL, "inline", default_name="x")
    assert t.name == "x" and t.source == "inline"


def test_snapdragon_targets_name_their_htp_and_soc():
    # QnnTypes.h QNN_SOC_MODEL_*: SM8550 43 (v73), SM8650 57 (v75), SM8750 69 (v79), SC8380XP 60 (v73).
    expected = {
        "snapdragon-8-gen-2": (73, 43),
        "snapdragon-8-gen-3": (75, 57),
        "snapdragon-8-elite": (79, 69),
        "snapdragon-x-elite": (73, 60),
    }
    for name, (arch, soc) in expected.items():
        t = load_target(name)
        assert (t.qnn.htp_arch, t.qnn.soc_model) == (arch, soc)
        assert t.runtimes == ("qnn", "aihub") and t.quantization_profile == "qnn" and t.lint.supported_ops == "qnn"
        assert set(t.precisions) == {"int8", "fp16"}


def test_snapdragon_targets_name_their_ai_hub_devices():
    # AI Hub's device list: the first is what `edgekit build --runtime aihub` compiles for.
    expected = {
        "snapdragon-8-gen-2": ("Samsung Galaxy S23 (Family)", "qualcomm-snapdragon-8gen2"),
        "snapdragon-8-gen-3": ("Samsung Galaxy S24 (Family)", "qualcomm-snapdragon-8gen3"),
        "snapdragon-8-elite": ("Samsung Galaxy S25 (Family)", "qualcomm-snapdragon-8-elite"),
        "snapdragon-x-elite": ("Snapdragon X Elite CRD", "qualcomm-snapdragon-x-elite"),
    }
    for name, (device, chipset) in expected.items():
        t = load_target(name)
        assert (t.aihub.devices[0], t.aihub.chipset) == (device, chipset)
    assert load_target("cpu").aihub.devices == ()


def test_an_aihub_target_without_devices_is_refused(tmp_path):
    path = tmp_path / "hub.toml"
    path.write_text('name = "hub"\nruntimes = ["aihub"]\nprecisions = ["int8"]\n')
    with pytest.raises(UsageError, match="a target that lists runtime aihub needs aihub.devices"):
        load_target(path)
    path.write_text(
        'name = "hub"\nruntimes = ["aihub"]\nprecisions = ["int8"]\n[aihub]\ndevices = ["X"]\n'
        'compile_options = "--target_runtime tflite"\n'
    )
    with pytest.raises(UsageError, match="aihub.compile_options must not set --target_runtime"):
        load_target(path)


def test_a_qnn_target_without_its_soc_is_refused(tmp_path):
    path = tmp_path / "sd.toml"
    path.write_text(
        'name = "sd"\nruntimes = ["qnn"]\nprecisions = ["int8"]\nquantization_profile = "qnn"\n[qnn]\nhtp_arch = 75\n'
    )
    with pytest.raises(UsageError, match="qnn.htp_arch and qnn.soc_model"):
        load_target(path)
    path.write_text(
        'name = "sd"\nruntimes = ["qnn"]\nprecisions = ["int8"]\n[qnn]\nhtp_arch = 75\nsoc_model = 57\n'
        'performance_mode = "turbo"\n'
    )
    with pytest.raises(UsageError, match="qnn.performance_mode = 'turbo' is invalid"):
        load_target(path)
