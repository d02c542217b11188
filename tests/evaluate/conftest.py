"""The tiny numpy runtimes check's tests decode too (the metrics live here, in evaluate)."""

from tests.check.conftest import fakes  # noqa: F401  (fixture)
