"""onnxruntime.quantization held quiet, for every quantize step that calls it (the cpu and qnn
quantizers, the sensitivity tools): ``quiet_ort_logging``."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_ort_logging() -> Iterator[None]:
    """ORT's quantizer logs advice through the root logger ("consider pre-processing", ...) and
    its histogram calibrators ``print`` progress to stdout, which would corrupt ``--json``:
    library code prints nothing, so hold the logs to errors and send stdout to the debug log."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            yield
    finally:
        root.setLevel(level)
        if captured.getvalue():
            logging.getLogger(__name__).debug("onnxruntime.quantization printed: %s", captured.getvalue().strip())
