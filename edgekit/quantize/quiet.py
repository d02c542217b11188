"""onnxruntime.quantization held quiet, for every quantize step that calls it (the cpu and qnn
quantizers, the sensitivity tools): ``quiet_ort_logging``."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
from collections.abc import Iterator
from typing import TextIO


class _Held:
    """The process-wide state one quiet block changes. The root logger's level and sys.stdout are
    the process's, not a thread's: quantize decodes on two threads at once (the budget's decode
    beside check's gate; the qnn lanes), and two save-and-restore blocks that overlapped out of
    order left the root logger at ERROR (the second saved the first's ERROR and restored it last)
    and could leave stdout captured. The first block to enter saves them; the last to leave
    restores them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.level = logging.NOTSET
        self.stdout: TextIO = sys.stdout
        self.captured = io.StringIO()

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                root = logging.getLogger()
                self.level, self.stdout = root.level, sys.stdout
                root.setLevel(max(root.level, logging.ERROR))
                self.captured = io.StringIO()
                sys.stdout = self.captured
            self.depth += 1

    def leave(self) -> str:
        """What library code printed while quiet, once the last block leaves ("" before)."""
        with self.lock:
            self.depth -= 1
            if self.depth:
                return ""
            logging.getLogger().setLevel(self.level)
            sys.stdout = self.stdout
            return self.captured.getvalue()


_HELD = _Held()


@contextlib.contextmanager
def quiet_ort_logging() -> Iterator[None]:
    """ORT's quantizer logs advice through the root logger ("consider pre-processing", ...) and
    its histogram calibrators ``print`` progress to stdout, which would corrupt ``--json``:
    library code prints nothing, so hold the logs to errors and send stdout to the debug log.
    Safe to nest, and to enter from several threads at once (``_Held``)."""
    _HELD.enter()
    try:
        yield
    finally:
        printed = _HELD.leave()
        if printed:
            logging.getLogger(__name__).debug("onnxruntime.quantization printed: %s", printed.strip())
