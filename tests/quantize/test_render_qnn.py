"""The qnn section of `edgekit quantize`'s console summary: the 8-bit share as the graph holds it,
and each promotion with why it was made (rule, override, budget)."""

from __future__ import annotations

from edgekit.output import Output
from edgekit.quantize.render import _print_qnn


def test_the_qnn_section_says_why_each_tensor_is_at_16_bit(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    q = {
        "htp_arch": 75,
        "soc_model": 57,
        "qnn_sdk": "2.51.0",
        "onnxruntime_qnn": "2.7.0",
        "activation_tensors": 10,
        "activations_16bit": 3,
        "promoted_16bit": 2,
        "weights_16bit": 1,
        "share_8bit": 0.7,
        "weights": "MatMul weights int8 per output channel",
        "promotions": [
            {
                "step": 1,
                "tensor": "mul_1",
                "kind": "activation",
                "produced_by": "node_mul_1 (Mul)",
                "output_snr_db": 46.8,
                "why": "rule: time angle",
            },
            {
                "step": 2,
                "tensor": "tok_emb.weight",
                "kind": "weight",
                "produced_by": "initializer",
                "output_snr_db": 41.1,
                "why": "budget",
            },
        ],
    }
    s = {
        "budget": {
            "measured_on": "qnn HTP backend (x86 emulation)",
            "limits": {"snr_db": 30.0},
            "history": [{"backend": "qnn-htp", "promoted": 2, "snr_db": 39.5, "passed": True}],
        }
    }
    _print_qnn(Output(), s, q)
    out = capsys.readouterr().out
    assert "70% of 10 tensors (3 at 16 bit)" in out
    assert "rule: time angle" in out and "budget" in out and "tok_emb.weight" in out
    assert "weights at 16 bit (MatMul, Gather tables)" in out
    assert "output SNR dB" in out and "41.1" in out
