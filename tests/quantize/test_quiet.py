"""``quiet_ort_logging``: what it holds quiet comes back as it was, however the blocks overlap."""

from __future__ import annotations

import logging
import sys
import threading

from edgekit.quantize.quiet import quiet_ort_logging


def test_it_quiets_the_root_logger_and_stdout_and_restores_both():
    root = logging.getLogger()
    level, out = root.level, sys.stdout
    with quiet_ort_logging():
        assert root.level >= logging.ERROR and sys.stdout is not out
        print("calibrating 3/5")  # a library's progress: not on the user's stdout
        with quiet_ort_logging():  # nested
            assert root.level >= logging.ERROR
        assert root.level >= logging.ERROR and sys.stdout is not out
    assert root.level == level and sys.stdout is out


def test_blocks_on_two_threads_that_leave_out_of_order_restore_what_was_before():
    """Thread A enters, B enters, A leaves, B leaves: a per-block save-and-restore left the root
    logger at ERROR (B saved A's ERROR and restored it last) and stdout captured."""
    root = logging.getLogger()
    level, out = root.level, sys.stdout
    root.setLevel(logging.WARNING)
    try:
        a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
        seen: list[int] = []

        def a() -> None:
            with quiet_ort_logging():
                a_in.set()
                b_in.wait(5)
            a_out.set()

        def b() -> None:
            a_in.wait(5)
            with quiet_ort_logging():
                b_in.set()
                a_out.wait(5)
                seen.append(root.level)  # still quiet after A left: B's block is open

        threads = [threading.Thread(target=a), threading.Thread(target=b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert seen == [logging.ERROR]
        assert root.level == logging.WARNING and sys.stdout is out
    finally:
        root.setLevel(level)
