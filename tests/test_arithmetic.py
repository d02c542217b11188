"""The CPU arithmetic INT8 runs on, modelled in numpy and checked against ONNX Runtime on this host.

Every verdict here holds on every x86 class: the kernel model for *this* host's class (saturating
pair sums on avx2/avx512, exact dot products on VNNI/AMX/ARM) must reproduce ORT bit for bit, and
the pair-bounded scheme must give the exact integer result whatever the class."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.arithmetic import (
    ISA,
    PAIR_LIMIT,
    SCHEMES,
    gemm_exact,
    gemm_pairs_saturating,
    k_axis,
    max_pair_sum,
    pair_range,
    saturation,
)
from edgekit.host import HostFacts, isa_class
from edgekit.manifest_sections import QuantizationSummary

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HOST = HostFacts.detect().isa_class


def _qdq_gemm(wq: np.ndarray, x_scale: float, w_scale: np.ndarray, op: str = "Gemm") -> bytes:
    """x float[M, K] -> Q(u8, zero point 0) -> DQ -> Gemm/MatMul with DQ(s8 weight [K, N], per column).
    ORT fuses it into QGemm / MatMulIntegerToFloat: MLAS's u8s8 kernel on the raw operands."""
    m, k = 6, wq.shape[0]
    n = wq.shape[1]
    inits = [
        numpy_helper.from_array(np.array(x_scale, np.float32), "xs"),
        numpy_helper.from_array(np.array(0, np.uint8), "xz"),
        numpy_helper.from_array(wq, "wq"),
        numpy_helper.from_array(w_scale.astype(np.float32), "ws"),
        numpy_helper.from_array(np.zeros(n, np.int8), "wz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
    ]
    if op == "Gemm":
        inits += [
            numpy_helper.from_array(np.zeros(n, np.int32), "bq"),
            numpy_helper.from_array((x_scale * w_scale).astype(np.float32), "bs"),
        ]
        nodes += [
            helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
            helper.make_node("Gemm", ["xd", "wd", "bd"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node("MatMul", ["xd", "wd"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model.SerializeToString()


@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_the_kernel_model_of_this_hosts_class_reproduces_onnxruntime(op):
    """Large u8 activations times full-range s8 weights: on avx2/avx512 ORT returns exactly the
    saturating pair-sum model (and not the exact product), elsewhere exactly the exact product."""
    rng = np.random.default_rng(0)
    wq = rng.integers(-127, 128, (64, 16)).astype(np.int8)
    ws = np.full(16, 0.01, np.float32)
    a = rng.integers(150, 256, (6, 64))
    x = (a * 0.02).astype(np.float32)  # quantizes back to exactly a (scale 0.02, zero point 0)
    sess = ort.InferenceSession(_qdq_gemm(wq, 0.02, ws, op), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": x})[0]
    sat, exact = gemm_pairs_saturating(a, wq) * 0.02 * 0.01, gemm_exact(a, wq) * 0.02 * 0.01
    assert not np.allclose(sat, exact, atol=1e-3)  # the operands do saturate the AVX2 kernel
    want = sat if ISA.get(HOST) is None or ISA[HOST].saturating_pairs else exact
    if HOST == "unknown":
        pytest.skip("unknown CPU class: no kernel model to compare")
    np.testing.assert_allclose(got, want, atol=1e-4, err_msg=f"host class {HOST}")


def test_pair_bounded_weights_are_exact_on_the_saturating_kernel():
    """Any float weight quantized with the pair bound: no consecutive pair passes 128, so the
    saturating model equals the exact product for every u8 activation (255 is the worst)."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((96, 24)) * rng.uniform(0.1, 3.0, 24)  # columns of very different range
    w[10, 3] = w[11, 3] = 9.0  # two large weights side by side: what full range would saturate on
    r = pair_range(w, 1, k_axis("MatMul", w, 1))
    q = np.clip(np.round(w / (r / 127)), -127, 127).astype(np.int8)
    assert max_pair_sum(q, 1, 0) <= PAIR_LIMIT
    worst = np.full((3, 96), 255)
    np.testing.assert_array_equal(gemm_pairs_saturating(worst, q), gemm_exact(worst, q))
    full = np.clip(np.round(w / (np.abs(w).max(0) / 127)), -127, 127).astype(np.int8)
    assert saturation(worst, full)["pairs"] > 0 and saturation(worst, q) == {"pairs": 0.0, "sqnr_db": float("inf")}


def test_conv_weights_are_bounded_over_any_pair():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 4, 3))  # (Cout, Cin, k)
    r = pair_range(w, 0, None)
    top2 = np.sort(np.abs(w).reshape(8, -1), 1)[:, -2:].sum(1)
    np.testing.assert_allclose(r, top2)
    q = np.round(w / (r / 127)[:, None, None]).astype(np.int64)
    flat = np.abs(q).reshape(8, -1)
    assert (np.sort(flat, 1)[:, -2:].sum(1) <= PAIR_LIMIT).all()


CPUINFO = {
    "AMD EPYC 7B12 (Zen 2)": ("flags : fpu sse sse2 avx avx2 fma bmi2", "avx2"),
    "Xeon Skylake-SP": ("flags : avx avx2 avx512f avx512bw avx512dq", "avx512"),
    "Xeon Cascade Lake": ("flags : avx2 avx512f avx512bw avx512_vnni", "avx512-vnni"),
    "Core i7-12700 (Alder Lake)": ("flags : avx2 avx_vnni", "avx-vnni"),
    "Xeon Sapphire Rapids": ("flags : avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8", "amx"),
    "Atom N270": ("flags : sse sse2 ssse3", "x86-64"),
}


@pytest.mark.parametrize("cpu", list(CPUINFO))
def test_isa_class_from_x86_flags(cpu):
    from edgekit.host import cpu_isa

    text, want = CPUINFO[cpu]
    assert isa_class("x86_64", cpu_isa(text)) == want


def test_isa_class_from_arm_features():
    from edgekit.host import cpu_isa

    assert (
        isa_class(
            "aarch64",
            cpu_isa(
                "Features : fp asimd evtstrm aes pmull sha1 sha2 crc32 "
                "atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp"
            ),
        )
        == "arm64-dotprod"
    )
    assert isa_class("aarch64", cpu_isa("Features : fp asimd asimddp sve i8mm bf16")) == "arm64-i8mm"
    assert isa_class("aarch64", cpu_isa("Features : fp asimd")) == "arm64"
    assert isa_class("riscv64", ()) == "unknown"


def _quant(validated_on: str, scheme: str = "u8s8") -> QuantizationSummary:
    return _summary(_recorded(validated_on, scheme))


def _recorded(validated_on: str, scheme: str = "u8s8") -> dict:
    return {
        "profile": "cpu",
        "arithmetic": {"isa": validated_on, "scheme": SCHEMES[scheme].to_json(), "validated_on": validated_on},
    }


def _summary(doc: dict) -> QuantizationSummary:
    """``manifest["quantization"]`` as ``Bundle.quantization`` answers it."""
    return QuantizationSummary.from_json(doc)


def test_a_model_validated_on_another_class_says_whether_its_accuracy_holds():
    from edgekit.arithmetic import host_warning

    assert host_warning(_quant("avx2", "u8s8-pair"), "avx2") is None  # same class: nothing to say
    # Full-range weights validated on VNNI, run on AVX2: the GEMMs saturate here.
    line = host_warning(_quant("avx512-vnni"), "avx2", "bundles/m")
    assert (
        "saturate on this avx2 CPU" in line and "`edgekit quantize bundles/m --isa avx2`" in line and "\n" not in line
    )
    # Bounded weights are exact everywhere: the accuracy holds, the speed is another CPU's.
    line = host_warning(_quant("avx2", "u8s8-pair"), "amx")
    assert "accuracy holds" in line and "edgekit profile" in line
    # A model from before the record: assume full range, say it may saturate on AVX2.
    assert "saturate" in host_warning(_summary({"profile": "cpu", "config": {}}), "avx2")
    assert host_warning(_summary({"profile": "cpu"}), "amx").startswith(
        "the int8 model was validated on a CPU edgekit did not record"
    )
    assert host_warning(_summary({"profile": "qnn"}), "avx2") is None and host_warning(None, "avx2") is None


def test_run_warns_once_when_the_int8_model_meets_another_class(tmp_path, monkeypatch, demo_bundles):
    """Through the CLI: the warning is in --json and on stderr, for int8 only."""
    import json
    import shutil

    from typer.testing import CliRunner

    from edgekit.bundle import Bundle
    from edgekit.cli import app
    from edgekit.quantize import QuantizeConfig
    from edgekit.quantize.cpu.ptq import quantize_unbudgeted

    src = Bundle.load(demo_bundles["masked"])
    root = tmp_path / "m"
    shutil.copytree(src.root, root)
    b = Bundle.load(root)
    staged = b.staging_path("int8.onnx")
    feeds = [
        {"tokens": np.full(b.inputs["tokens"].shape, 3), "class_id": np.zeros(b.inputs["class_id"].shape, np.int64)}
    ]
    quantize_unbudgeted(b.path_of("fp32"), staged, feeds, QuantizeConfig(scheme="u8s8"))
    b.add_artifact("int8", staged, made_by="quantize", config={}, suffix=".onnx")
    b.record("quantization", _recorded("avx512-vnni"))
    b.save()
    monkeypatch.setattr(
        HostFacts,
        "detect",
        classmethod(lambda cls, root="/": HostFacts("x86_64", "EPYC", None, None, False, ("avx2",))),
    )
    runner = CliRunner()
    r = runner.invoke(app, ["run", str(root), "--precision", "int8", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert sum("saturate on this avx2 CPU" in w for w in doc["warnings"]) == 1
    r = runner.invoke(app, ["run", str(root), "--precision", "fp32", "--json"])
    assert not any("avx2" in w for w in json.loads(r.stdout)["warnings"])


def test_lint_reports_an_int8_model_that_saturates_the_targets_class(tmp_path, demo_bundles):
    import shutil

    from edgekit.bundle import Bundle
    from edgekit.lint import lint_report
    from edgekit.quantize import QuantizeConfig
    from edgekit.quantize.cpu.ptq import quantize_unbudgeted

    def bundle_with(scheme: str, name: str):
        root = tmp_path / name
        shutil.copytree(Bundle.load(demo_bundles["masked"]).root, root)
        b = Bundle.load(root)
        rng = np.random.default_rng(0)
        feeds = [
            {
                "tokens": rng.integers(0, 64, b.inputs["tokens"].shape),
                "class_id": rng.integers(0, 8, b.inputs["class_id"].shape),
            }
        ]
        staged = b.staging_path("int8.onnx")
        quantize_unbudgeted(b.path_of("fp32"), staged, feeds, QuantizeConfig(scheme=scheme))
        b.add_artifact("int8", staged, made_by="quantize", config={"profile": "cpu"}, suffix=".onnx")
        b.record("quantization", _recorded("avx512-vnni", scheme))
        b.save()
        return root

    full, bounded = bundle_with("u8s8", "full"), bundle_with("u8s8-pair", "pair")
    doc = lint_report(full, "x86-avx2")
    hits = [f for f in doc["findings"] if f["rule"] == "int8-arithmetic"]
    assert not doc["passed"] and len(hits) == 1 and hits[0]["severity"] == "error"
    assert f"edgekit quantize {full} --target x86-avx2" in hits[0]["hint"] and hits[0]["nodes"]
    assert not [f for f in lint_report(full, "x86-avx512-vnni")["findings"] if f["rule"] == "int8-arithmetic"]
    assert not [f for f in lint_report(bounded, "x86-avx2")["findings"] if f["rule"] == "int8-arithmetic"]
