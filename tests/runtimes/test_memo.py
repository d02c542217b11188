"""MemoRuntime: answers a feed it has run from what it kept, opens its network only on a miss."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.runtimes.base import KeyedFeeds, Runtime
from edgekit.runtimes.memo import MemoRuntime, feed_digest
from edgekit.runtimes.ort import OrtRuntime

pytest.importorskip("onnxruntime")


class Counting:
    """Counts the runs that reach the network."""

    def __init__(self, rt):
        self.rt, self.runs, self.closed = rt, 0, False
        self.name, self.inputs, self.outputs = rt.name, rt.inputs, rt.outputs
        self.device, self.warnings, self.model_files = rt.device, rt.warnings, rt.model_files

    def run(self, feeds):
        self.runs += 1
        return self.rt.run(feeds)

    def close(self):
        self.closed = True
        self.rt.close()


def feeds(i: int) -> dict[str, np.ndarray]:
    return {"x": np.full((2, 3), float(i), dtype=np.float32)}


def test_a_feed_seen_before_is_answered_without_the_network(matmul_add_onnx, matmul_add_reference):
    inner = Counting(OrtRuntime(matmul_add_onnx))
    with MemoRuntime(inner) as memo:
        assert isinstance(memo, Runtime)
        first = [memo.run(feeds(i)) for i in range(3)]
        again = [memo.run(feeds(i)) for i in (2, 0, 1)]  # another order: keyed by content, not position
        assert inner.runs == 3 and memo.misses == 3 and memo.hits == 3
        for i, out in zip((2, 0, 1), again):
            for name, value in matmul_add_reference(feeds(i)["x"]).items():
                np.testing.assert_allclose(out[name], value, rtol=1e-6)
                np.testing.assert_array_equal(out[name], first[i][name])
    assert inner.closed


def test_answers_are_the_callers_to_keep(matmul_add_onnx):
    with MemoRuntime(OrtRuntime(matmul_add_onnx)) as memo:
        out = memo.run(feeds(1))
        kept = out["y"].copy()
        out["y"][:] = 99.0  # a loop writing into what it was handed must not change the memo
        np.testing.assert_array_equal(memo.run(feeds(1))["y"], kept)


def test_the_network_opens_on_the_first_miss_and_again_after_release(matmul_add_onnx, tmp_path):
    opened = []

    def opener():
        opened.append(Counting(OrtRuntime(matmul_add_onnx)))
        return opened[-1]

    with OrtRuntime(matmul_add_onnx) as probe:
        io = dict(inputs=probe.inputs, outputs=probe.outputs)
    memo = MemoRuntime(opener=opener, **io, folder=tmp_path / "memo")
    assert not memo.opened and opened == []
    memo.run(feeds(0))
    assert len(opened) == 1 and memo.opened
    memo.release()
    assert opened[0].closed and not memo.opened
    memo.run(feeds(0))  # kept: nothing opens
    assert len(opened) == 1
    memo.run(feeds(5))  # new: opens again
    assert len(opened) == 2 and opened[1].runs == 1
    memo.close()


def test_answers_past_the_memory_bound_go_to_the_folder_and_come_back_equal(matmul_add_onnx, tmp_path):
    folder = tmp_path / "memo"
    with MemoRuntime(OrtRuntime(matmul_add_onnx), folder=folder, ram_bytes=64) as memo:  # one answer is 64 bytes
        first = [memo.run(feeds(i)) for i in range(4)]
        assert len(list(folder.glob("*.npz"))) == 3
        for i in range(4):
            out = memo.run(feeds(i))
            for name in out:
                np.testing.assert_array_equal(out[name], first[i][name])
        assert memo.misses == 4 and memo.hits == 4


def test_without_a_folder_answers_past_the_bound_are_run_again(matmul_add_onnx):
    inner = Counting(OrtRuntime(matmul_add_onnx))
    with MemoRuntime(inner, ram_bytes=64) as memo:
        memo.run(feeds(0)), memo.run(feeds(1)), memo.run(feeds(1))
        assert inner.runs == 3 and memo.hits == 0


def test_the_digest_tells_dtype_shape_and_name_apart():
    a = np.zeros((2, 3), dtype=np.float32)
    digests = {
        feed_digest({"x": a}),
        feed_digest({"x": a.reshape(3, 2)}),
        feed_digest({"x": a.view(np.int32)}),
        feed_digest({"y": a}),
        feed_digest({"x": a + 1}),
    }
    assert len(digests) == 5
    assert feed_digest({"x": a, "y": a + 1}) == feed_digest({"y": a + 1, "x": a.copy()})


def test_a_vouched_array_is_digested_by_its_key_and_the_rest_by_their_bytes():
    a, small = np.zeros((4, 3), dtype=np.float32), np.ones(2, dtype=np.int64)
    keyed = feed_digest(KeyedFeeds({"cache": a, "pos": small}, {"cache": "k1"}))
    # The key stands for the bytes: other bytes under the same key digest alike (nothing read) ...
    assert feed_digest(KeyedFeeds({"cache": a + 7, "pos": small}, {"cache": "k1"})) == keyed
    # ... but another key, other unvouched bytes, another shape or the plain feeds all differ.
    assert feed_digest(KeyedFeeds({"cache": a, "pos": small}, {"cache": "k2"})) != keyed
    assert feed_digest(KeyedFeeds({"cache": a, "pos": small + 1}, {"cache": "k1"})) != keyed
    assert feed_digest(KeyedFeeds({"cache": a.reshape(3, 4), "pos": small}, {"cache": "k1"})) != keyed
    assert feed_digest({"cache": a, "pos": small}) != keyed
    # Keys for names not fed are dropped; a copy into a plain dict carries none.
    assert KeyedFeeds({"pos": small}, {"cache": "k1"}).content_keys == {}
    assert feed_digest(dict(KeyedFeeds({"cache": a, "pos": small}, {"cache": "k1"}))) == feed_digest(
        {"cache": a, "pos": small}
    )


def test_a_lane_shares_the_answers_and_runs_its_misses_on_its_own_network(matmul_add_onnx, matmul_add_reference):
    import threading

    first, second = Counting(OrtRuntime(matmul_add_onnx)), Counting(OrtRuntime(matmul_add_onnx))
    memo = MemoRuntime(first)
    lane = memo.lane(second)
    assert lane.inputs == memo.inputs and lane.outputs == memo.outputs
    answered = {i: memo.run(feeds(i)) for i in range(3)}
    again = lane.run(feeds(1))  # the first memo's answer: the lane's network does not run
    assert second.runs == 0 and lane.hits == 1
    np.testing.assert_array_equal(again["y"], answered[1]["y"])
    lane.run(feeds(7))
    assert second.runs == 1 and memo.run(feeds(7)) is not None and first.runs == 3  # the lane's answer is kept
    # Asked from two threads at once: every answer right, each miss on the asking lane's network.
    ran: list[int] = []
    before = (memo.misses + lane.misses, memo.hits + lane.hits)

    def ask(m, items):
        for i in items:
            ran.append(i)
            np.testing.assert_allclose(m.run(feeds(i))["y"], matmul_add_reference(feeds(i)["x"])["y"], rtol=1e-6)

    threads = [threading.Thread(target=ask, args=(m, range(10, 40))) for m in (memo, lane)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    misses = memo.misses + lane.misses - before[0]
    assert len(ran) == 60 and 30 <= misses <= 60 and misses + memo.hits + lane.hits - before[1] == 60
    assert first.runs + second.runs == memo.misses + lane.misses
    lane.close()
    assert second.closed and not first.closed
