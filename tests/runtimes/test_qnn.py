"""The Qualcomm HTP backend (onnxruntime-qnn). On x86 its HTP library emulates the NPU, so these
run for real here: no device, no skip. Graphs are hand-built and tiny (the emulation is slow)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from edgekit.errors import MissingDependency, UsageError
from edgekit.runtimes.qnn import QnnCompileError, QnnOptions, QnnRuntime, float_nodes, refused_nodes
from tests.qnn_graphs import feeds as _feeds


def _snr(ref: np.ndarray, out: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum((ref - out) ** 2), 1e-30)))


def test_full_integer_graph_runs_on_the_htp_backend_close_to_fp32(qnn_graphs):
    import onnxruntime as ort

    assert float_nodes(qnn_graphs["qdq"]) == []  # every op quantized: nothing for the NPU to run in float
    ref = ort.InferenceSession(str(qnn_graphs["fp32"]), providers=["CPUExecutionProvider"])
    with QnnRuntime(qnn_graphs["qdq"]) as rt:
        assert "HTP" in rt.device and rt.providers_used[0] == "QNNExecutionProvider"
        assert rt.emulated == (rt.timing_note is not None)
        assert not rt.precompiled and rt.session_info["seconds"] > 0
        for feed in _feeds(3, seed=7):
            out = rt.run(feed)["y"]
            assert _snr(ref.run(None, feed)[0], out) > 25  # uint8 per-tensor: ~35-40 dB on this graph


def test_fp16_runs_the_float_graph_in_half_precision(qnn_graphs):
    import onnxruntime as ort

    ref = ort.InferenceSession(str(qnn_graphs["fp32"]), providers=["CPUExecutionProvider"])
    feed = _feeds(1, seed=3)[0]
    with QnnRuntime(qnn_graphs["fp32"], QnnOptions(fp16=True)) as rt:
        assert "fp16" in rt.device
        assert _snr(ref.run(None, feed)[0], rt.run(feed)["y"]) > 45  # fp16 rounding only


def test_outputs_are_double_buffered_like_ort(qnn_graphs):
    with QnnRuntime(qnn_graphs["qdq"]) as rt:
        assert rt.outputs_stay_valid == 2
        a = rt.run(_feeds(1, seed=1)[0])["y"]
        b = rt.run(_feeds(1, seed=2)[0])["y"]
        assert a is not b and not np.shares_memory(a, b)


def test_a_node_the_npu_refuses_is_one_error_naming_node_and_op(qnn_graphs):
    # The cpu profile leaves float bias Adds and int8 per-channel weights: no silent CPU partition.
    with pytest.raises(QnnCompileError) as info:
        QnnRuntime(qnn_graphs["cpu_int8"])
    err = info.value
    assert err.exit_code == 3 and "\n" not in str(err)
    assert err.findings and all({"node", "op"} <= set(f) for f in err.findings)
    assert f"{err.findings[0]['node']!r} ({err.findings[0]['op']})" in str(err)
    assert "--profile qnn" in str(err)


def test_refused_nodes_parses_the_ep_log():
    log = (
        "QNN.backendValidateOpConfig() failed for node `fc1` of type `FullyConnected` with error code 3110\n"
        "Unsupported nodes in QNN EP: { name: fc1, type: Gemm }{ name: ln, type: LayerNormalization }"
    )
    assert refused_nodes(log) == [
        {"node": "fc1", "op": "Gemm", "qnn_op": "FullyConnected"},
        {"node": "ln", "op": "LayerNormalization", "qnn_op": ""},
    ]


def test_float_nodes_names_what_would_run_in_float(qnn_graphs):
    names = {f["node"] for f in float_nodes(qnn_graphs["fp32"])}
    assert names == {"fc1", "fc1_bias", "act", "fc2"}


def test_native_banners_do_not_reach_stdout(qnn_graphs, capfd):
    # The QNN libraries print a banner to stdout when the backend loads: `--json` must stay one document.
    with QnnRuntime(qnn_graphs["qdq"]) as rt:
        rt.run(_feeds(1)[0])
    out = capfd.readouterr().out
    assert "LIBNATIVE" not in out and out == ""


def test_bad_options_are_usage_errors():
    with pytest.raises(UsageError, match="htp_performance_mode"):
        QnnOptions(performance_mode="turbo")
    with pytest.raises(UsageError, match="htp_arch >= 73"):
        QnnOptions(htp_arch=69, fp16=True)


def test_missing_onnxruntime_qnn_is_exit_3_with_the_install_line(qnn_graphs, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", None)
    with pytest.raises(MissingDependency) as info:
        QnnRuntime(qnn_graphs["qdq"])
    assert info.value.exit_code == 3 and "pip install 'edgekit[qnn]'" in str(info.value)
