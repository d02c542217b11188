"""How the cpu and trt profiles write a budget-search candidate: ``quantize_static`` once per scale
set (the all-INT8 graph of the selected nodes, per step bucket where there are buckets), and every
other candidate (each fallback step, each one-node model of the sensitivity ranking, the
weight-only form) derived from it by editing the graph (``cpu/derive.py``), which writes what
``quantize_model`` would have written for that node set without running the quantizer, and
without a copy of the weights: the candidate names the side files they are in.

Where a graph cannot be derived (``derive.derivation_blocker``: shared weights, quantized graph
outputs, ops other than MatMul/Gemm/Conv, ...) or one candidate cannot (a node set outside the
selected one, a weight-only weight ORT scaled otherwise), ``quantize_model`` writes it, as before.

Measured on the demos (2 cores, ORT 1.32): ``quantize_model`` took 0.05-0.4 s a candidate, a
derived one 5-35 ms; on a 600 M-parameter model a ``quantize_static`` build took ~54 s and held
the float model and its INT8 copy in memory (with the weights in a side file it now holds the INT8
weights only: ``cpu/streamed.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.cpu.derive import derivation_blocker, derive_candidate
from edgekit.quantize.cpu.ptq import quantize_model
from edgekit.quantize.graph import GraphPlan


@dataclass(frozen=True)
class AllInt8:
    """The all-INT8 graph of one scale set, and why candidates cannot be derived from it (None: they can)."""

    path: Path
    blocker: str | None


class CandidateWriter:
    """Writes the candidates of one quantize run (``write``); counts how each was made."""

    def __init__(
        self,
        prepared: Path,
        cfg: QuantizeConfig,
        plan: GraphPlan,
        selected: Sequence[str],
        name: Callable[[str], Path],
        tables: Sequence[str] = (),
    ):
        self.prepared, self.cfg, self.plan = prepared, cfg, plan
        self.selected = list(selected)
        self.tables = list(tables)  # Gathers whose table every candidate stores int8 (select.select_tables)
        self.name = name  # a fresh path in the run's scratch folder for a prefix ("int8" -> int8-7.onnx)
        self.bases: dict[Any, AllInt8] = {}
        self.derived = 0
        self.quantized = 0

    def write(
        self,
        nodes: Sequence[str],
        weight_only: Sequence[str],
        reader: Any,
        cache: Path | None,
        scales: Any = None,
    ) -> Path:
        """The candidate with exactly ``nodes`` in INT8 (``weight_only``: as ``quantize_model``
        takes it), calibrated by ``reader``/``cache``; ``scales`` names its scale set (one per
        step bucket), whose all-INT8 graph is written first where there is none yet."""
        out = self.name("int8")
        # One all-INT8 base per set of ranges: the step bucket's and the calibrator's
        # (``--method auto`` may judge percentile's beside minmax's and go back).
        scales = (self.cfg.calibrator, scales)
        if set(nodes) <= set(self.selected):
            base = self.bases.get(scales) or self._base(weight_only, reader, cache, scales)
            if base.blocker is None and derive_candidate(
                self.prepared,
                base.path,
                out,
                nodes,
                self.selected,
                weight_only,
                self.cfg.settings.quantized_outputs,
            ):
                self.derived += 1
                return out
        # Not derivable (a node set outside the selected one, a graph derive.py does not know, a
        # weight-only weight ORT scaled otherwise): the quantizer itself.
        self._quantize(nodes, weight_only, reader, cache, out)
        return out

    def _base(self, weight_only: Sequence[str], reader: Any, cache: Path | None, scales: Any) -> AllInt8:
        """The all-INT8 graph of ``scales``: kept for the whole run (candidates read its side file)
        and never handed out itself (a caller deletes candidates it is done with)."""
        path = self.name("all-int8")
        self._quantize(self.selected, weight_only, reader, cache, path)
        blocker = derivation_blocker(self.prepared, path, self.selected, self.cfg.settings.quantized_outputs)
        self.bases[scales] = AllInt8(path, blocker)
        return self.bases[scales]

    def _quantize(self, nodes: Sequence[str], weight_only: Sequence[str], reader: Any, cache: Path | None, out: Path):
        quantize_model(
            self.prepared,
            out,
            reader,
            nodes,
            self.cfg,
            self.plan,
            calibration_cache=cache,
            weight_only=weight_only,
            tables=self.tables,
        )
        self.quantized += 1

    def to_json(self) -> dict[str, Any]:
        """How this run's candidates were made (the summary's ``candidates``)."""
        blockers = sorted({b.blocker for b in self.bases.values() if b.blocker is not None})
        return {
            "derived": self.derived,
            "quantize_static": self.quantized,
            "not_derived_because": blockers[0] if blockers else None,
        }
