"""What ``edgekit debug`` is configured by. Defaults live here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import one_of
from edgekit.host import ISA_CLASSES
from edgekit.limits import check_options

SCHEMA = "edgekit.debug/1"
# An op whose own added noise is below this (SQNR of what it adds, dB) is where the error enters.
# 8-bit per-tensor activations and per-channel weights give a MatMul 30-40 dB on its own (the test
# models' healthy layers: 36-50 dB, 8-bit HTP adds: 25-40 dB); a layer at 20 dB has ten times
# the noise power of a healthy one.
DEFAULT_THRESHOLD_DB = 20.0


@dataclass(frozen=True)
class DebugConfig:
    candidate: str = "int8"  # the variant under test: runtime:precision, a precision (on `runtime`) or a runtime
    reference: str = "fp32"  # the known-good variant whose trajectory is replayed
    runtime: str = "ort"  # runtime of a variant given as a bare precision
    target: str | None = None  # a variant on the target's runtime loads its engine (qnn: the target's HTP)
    threshold_db: float = DEFAULT_THRESHOLD_DB
    # Rows replayed teacher-forced with every tensor captured; None = one graph batch.
    rows: int | None = None
    # check's gate: rows, seed and decode settings; None = what quantize judged the int8 model on.
    n: int | None = None
    seed: int | None = None
    cond_data: Path | None = None  # --cond-data: real condition rows (quantize's held-out split)
    fix: bool = False  # try the smallest fixes, write the winner into the bundle and re-quantize
    html: Path | None = None  # folder for the heatmap page
    threads: int = 0
    # The CPU class the int8 kernel's accumulation is modelled for ("host": this machine's).
    isa: str = "host"

    def __post_init__(self) -> None:
        check_options(
            {
                "--threshold": self.threshold_db,
                "--rows": self.rows,
                "--n": self.n,
                "--seed": self.seed,
                "--threads": self.threads,
            }
        )
        one_of("--isa", self.isa, ("host", *ISA_CLASSES))
