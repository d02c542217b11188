"""The shared device (stream/pipeline.py): one call at a time, earliest deadline first (token
calls last), outputs copied before another stream can overwrite them; the token feed's prefix."""

from __future__ import annotations

import threading
import time

import numpy as np

from edgekit.runtimes.base import BaseRuntime
from edgekit.spec import TensorSpec
from edgekit.stream.device import Device, DeviceRuntime
from edgekit.stream.pipeline import TokenFeed


class Counter(BaseRuntime):
    """x float32[1, 2] -> y = x + calls, in one reused output buffer (as IOBinding does)."""

    name = "counter"

    def __init__(self):
        super().__init__({"x": TensorSpec((1, 2), "float32")}, {"y": TensorSpec((1, 2), "float32")})
        self.calls = 0
        self.order: list[str] = []
        self.active = 0
        self.max_active = 0
        self._out = np.zeros((1, 2), dtype=np.float32)

    def _run_impl(self, feeds):
        self.order.append(threading.current_thread().name)  # recorded while the device is held
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.calls += 1
        self._out[...] = feeds["x"] + self.calls
        time.sleep(0.001)
        self.active -= 1
        return {"y": self._out}


def _wait_until(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out waiting for the threads"
        time.sleep(0.001)


def test_one_call_at_a_time_and_outputs_are_owned():
    """Each thread's outputs live in its own two buffers: another stream's calls never overwrite
    them, and an output survives the thread's next call (outputs_stay_valid = 2)."""
    inner, device = Counter(), Device()
    rts = [DeviceRuntime(inner, device) for _ in range(4)]
    values: list[int] = []
    kept: list[tuple[np.ndarray, int]] = []  # each thread's last two outputs and their values
    lock = threading.Lock()

    def work(rt, i):
        device.set_deadline(i % 2)  # equal keys too
        prev = None
        for _ in range(10):
            y = rt.run({"x": np.zeros((1, 2), np.float32)})["y"]
            if prev is not None:
                assert int(prev[0][0, 0]) == prev[1]  # the previous output survived this call
            prev = (y, int(y[0, 0]))
            with lock:
                values.append(prev[1])
        with lock:
            kept.append(prev)

    threads = [threading.Thread(target=work, args=(rt, i)) for i, rt in enumerate(rts)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert inner.max_active == 1 and device.calls == 40
    assert sorted(values) == list(range(1, 41))  # every call's own output
    assert all(int(y[0, 0]) == v for y, v in kept)  # no thread's output overwritten by another's calls
    assert rts[0].outputs_stay_valid == 2


def test_first_chunk_holds_token_calls_back():
    """While a first chunk decodes, token calls (no deadline) wait even when the device is free."""
    inner, device = Counter(), Device()
    done = threading.Event()

    def tokens():
        DeviceRuntime(inner, device).run({"x": np.zeros((1, 2), np.float32)})
        done.set()

    with device.first_chunk():
        t = threading.Thread(target=tokens, name="tokens")
        t.start()
        _wait_until(lambda: len(device.waiting) == 1)
        device.set_deadline(5.0)
        DeviceRuntime(inner, device).run({"x": np.zeros((1, 2), np.float32)})  # a chunk call goes through
        assert not done.is_set() and inner.calls == 1
    t.join(5.0)
    assert done.is_set() and inner.order[-1] == "tokens"


def test_earliest_deadline_goes_first_and_token_calls_last():
    inner, device = Counter(), Device()

    def call(due):
        if due is not None:
            device.set_deadline(due)
        DeviceRuntime(inner, device).run({"x": np.zeros((1, 2), np.float32)})

    threads = []
    with device.hold(key=0.0):  # the device is busy while all of them queue up
        for name, due in (("tokens", None), ("late chunk", 200.0), ("early chunk", 100.0)):
            threads.append(threading.Thread(target=call, args=(due,), name=name))
            threads[-1].start()
            _wait_until(lambda n=len(threads): len(device.waiting) == n)
    [t.join() for t in threads]
    assert inner.order == ["early chunk", "late chunk", "tokens"]


def test_token_feed_publishes_a_growing_prefix():
    feed = TokenFeed(4)
    feed.publish(np.array([[3, 1, 9, 9, 9, 9]]), 2)
    feed.publish(np.array([[3, 1, 9, 9, 9, 9]]), 1)  # never shrinks
    assert feed.ready == 2 and feed.tokens.tolist() == [[3, 1, 0, 0]]
    feed.publish(np.array([[3, 1, 2, 5, 7, 7]]), 6)  # a longer generator fills the first 4
    assert feed.ready == 4 and feed.tokens.tolist() == [[3, 1, 2, 5]]
    feed.wait_for(4)
