"""quantize's preflight counts the recorded calls and the kept answers its scratch folder holds."""

from edgekit.quantize.calibrate import RECORD_MAX_BYTES
from edgekit.quantize.scratch import calls_per_decode, kept_calls_bytes
from edgekit.runtimes.memo import RAM_BYTES
from edgekit.spec import TensorSpec

MB = 1 << 20


def test_calls_per_decode_counts_steps_solver_tokens_and_guidance():
    assert calls_per_decode("masked", {}, {"steps": 12}, {}) == 12
    assert calls_per_decode("masked", {}, {"steps": 12}, {"guidance": 3.0}) == 24
    assert calls_per_decode("flow", {}, {"steps": 4, "solver": "heun"}, {}) == 8
    assert calls_per_decode("flow", {}, {"steps": 4}, {"solver": "rk4"}) == 16
    assert calls_per_decode("ar", {"max_len": 256}, {}, {}) == 256
    assert calls_per_decode("ar", {"max_len": 256}, {}, {"length": 100}) == 100


def test_an_ar_recording_is_counted_at_its_cap_and_the_answers_past_memory():
    cache = TensorSpec((24, 1, 16, 256, 64), "float32")  # 25 MB each, as ar-gpt-medium's
    inputs = {"token": TensorSpec((1, 1), "int64"), "k_cache": cache, "v_cache": cache}
    new = TensorSpec((24, 1, 16, 1, 64), "float32")
    outputs = {"logits": TensorSpec((1, 1024), "float32"), "k_new": new, "v_new": new}
    call_in = 8 + 2 * 24 * 16 * 256 * 64 * 4
    call_out = 4096 + 2 * 24 * 16 * 64 * 4
    got = kept_calls_bytes("ar", inputs, outputs, 1, {"max_len": 256}, {}, {}, calib_samples=8, eval_samples=16)
    answers = call_out * 256 * 16  # FP32's on 16 held-out decodes; a candidate's twice that
    assert got == RECORD_MAX_BYTES + call_in + (answers - RAM_BYTES) + (2 * answers - RAM_BYTES)


def test_a_small_run_counts_what_it_records_and_nothing_for_answers_held_in_memory():
    inputs = {"tokens": TensorSpec((8, 64), "int64")}
    outputs = {"logits": TensorSpec((8, 64, 65), "float32")}
    got = kept_calls_bytes("masked", inputs, outputs, 8, {}, {"steps": 8}, {}, calib_samples=16, eval_samples=16)
    assert got == 8 * 64 * 8 * 8 * 2  # 8 calls a decode, 2 decodes of 8 rows; answers stay in memory
    assert got < MB
