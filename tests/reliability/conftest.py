"""Every attack in this folder runs under a time limit (issue #30, item 5): a hang is a failure
named as such, not a CI job killed at its own timeout. ``@pytest.mark.time_limit(S)`` sets one
test's limit; the default is generous for a loaded 2-core machine."""

from __future__ import annotations

import signal
import threading

import pytest

DEFAULT_LIMIT_S = 300


class TimeLimitExceeded(BaseException):
    """Raised in the test's thread when its time is up (a BaseException: no handler swallows it)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "time_limit(seconds): fail the test when it runs longer (tests/reliability)")


@pytest.fixture(autouse=True)
def _time_limit(request):
    marker = request.node.get_closest_marker("time_limit")
    limit = int(marker.args[0]) if marker else DEFAULT_LIMIT_S
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expired(signum, frame):
        raise TimeLimitExceeded(f"{request.node.nodeid} ran longer than its {limit} s limit")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
