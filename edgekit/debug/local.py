"""What one op adds by itself: the reference's float op run on the candidate's own inputs,
against the candidate's output (the op "teacher-forced" on the candidate's values).

A relative error does not pass through a layer unchanged (a head that maps a small error
direction onto a large logit gap amplifies it), so "output noise minus input noise" blames the
layer after the one that broke. Here each suspect op (its output SQNR within ``topology.SUSPECT_MARGIN_DB``
of the threshold) is cut out of the reference graph with its uncaptured upstream ops
(``onnx.utils.Extractor``), fed the candidate's captured values of its inputs, and its output
compared with the candidate's: the noise the op added, relative to the reference output's power.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import side_files_beside
from edgekit.debug.replay import Trajectory
from edgekit.debug.taps import Tapped
from edgekit.debug.topology import Op, Topology, region
from edgekit.evaluate import power_ratio_db as sqnr_db
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.ort import OrtOptions, OrtRuntime  # lazy: onnxruntime


class LocalJudge:
    """``own_db(step, op)``: the SQNR (dB) of the noise ``op`` adds at ``step`` by itself, or None
    where a region input was not captured on the candidate.

    Runs each step's calls on the tapped variants once and keeps, per call, only the tensors the
    step's suspects need (``plan(step)``: the (op, output) pairs ``locate`` will ask about; their
    outputs on both variants, the candidate's values of their regions' inputs), one variant's whole
    capture alive at a time: memory is the needed tensors of one step's calls, not every tensor of
    them (at size each call's capture is gigabytes). A question outside the plan captures again."""

    def __init__(
        self,
        fp32: Path,
        topo: Topology,
        traj: Trajectory,
        ref: Tapped,
        cand: Tapped,
        tmp: Path,
        threads: int = 0,
        plan: Callable[[int], Sequence[tuple[Op, str]]] | None = None,
    ):
        onnx = require("onnx")
        # The graph alone (weights in a side file stay there: each cut reads its own from it).
        self.model = onnx.shape_inference.infer_shapes(load_onnx(fp32, "artifact 'fp32'"))
        self.fp32 = fp32
        self.topo, self.traj, self.ref, self.cand, self.tmp, self.threads = topo, traj, ref, cand, tmp, threads
        self.plan = plan
        self.inputs = {i.name for i in self.model.graph.input}
        self.constants = {i.name for i in self.model.graph.initializer} | set(topo.exact) - self.inputs
        self.captured = set(cand.names) & set(ref.names)
        self._step: int | None = None
        self._kept: tuple[set[str], set[str]] = (set(), set())  # reference tensors kept of (ref, cand)
        # per call of the step: (ref's kept tensors, cand's kept tensors, feeds), keyed by reference tensor
        self._values: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray], Mapping[str, np.ndarray]]] = []
        self._cut = 0

    def _needs(self, op: Op) -> list[str] | None:
        """The inputs of ``op``'s region (graph inputs or captured tensors), or None where one was not captured."""
        ops = region(self.topo, op, self.captured)
        made = {o for n in ops for o in n.outputs}
        needed = [i for n in ops for i in n.inputs if i and i not in made and i not in self.constants]
        needed = list(dict.fromkeys(needed))
        return None if any(i not in self.inputs and i not in self.captured for i in needed) else needed

    def _wanted(self, step: int, asked: Sequence[tuple[Op, str]]) -> tuple[set[str], set[str]]:
        ref, cand = set(), set()
        for op, tensor in [*asked, *(self.plan(step) if self.plan else [])]:
            needed = self._needs(op)
            if needed is not None:
                ref.add(tensor)
                cand |= {tensor, *(i for i in needed if i not in self.inputs)}
        return ref, cand

    def _capture(self, step: int, ref_names: set[str], cand_names: set[str]) -> None:
        if self._step == step and ref_names <= self._kept[0] and cand_names <= self._kept[1]:
            return
        self._values, self._step = [], None  # the previous step's values go before the next are made
        for i in self.traj.calls_of(step):
            feeds = self.traj.feeds[i]
            r = _kept(self.ref, feeds, ref_names)
            c = _kept(self.cand, feeds, cand_names)
            self._values.append((r, c, feeds))
        self._step, self._kept = step, (ref_names, cand_names)

    def prefetch(self, step: int, asked: Sequence[tuple[Op, str]]) -> None:
        """Capture ``step``'s values for ``asked`` (and the plan's) in one pass over its calls,
        so the questions that follow about any of them run no tapped session again."""
        self._capture(step, *self._wanted(step, asked))

    def own_db(self, step: int, op: Op, tensor: str) -> float | None:
        needed = self._needs(op)
        if needed is None:
            return None
        self._capture(step, *self._wanted(step, [(op, tensor)]))
        with self._session(needed, tensor) as rt:
            signal = noise = 0.0
            for r, c, feeds in self._values:
                fed = {i: _cast(feeds[i] if i in self.inputs else c[i], rt.inputs[i]) for i in needed}
                alone = np.asarray(rt.run(fed)[tensor], np.float64)
                ref = np.asarray(r[tensor], np.float64)
                got = np.asarray(c[tensor], np.float64).reshape(alone.shape)
                signal += float(np.sum(ref**2))
                noise += float(np.sum((got - alone) ** 2))
        return sqnr_db(signal, noise)

    def _session(self, inputs: Sequence[str], output: str) -> Any:
        onnx = require("onnx")
        self._cut += 1
        path = self.tmp / f"local-{self._cut}.onnx"
        cut = onnx.utils.Extractor(self.model).extract_model(list(inputs), [output])
        onnx.save(cut, str(path))
        with side_files_beside(self.fp32, self.tmp):
            return OrtRuntime(path, OrtOptions(intra_op_threads=self.threads, io_binding=False))


def _kept(tapped: Tapped, feeds: Mapping[str, np.ndarray], tensors: set[str]) -> dict[str, np.ndarray]:
    """``tensors`` (reference names) of one tapped run on ``feeds``, copied out of the run's result,
    which is dropped here: the whole capture of a call lives only inside this function."""
    out = tapped.runtime.run(feeds)
    return {t: np.array(out[tapped.names[t]], copy=True) for t in tensors}


def _cast(value: np.ndarray, spec: Any) -> np.ndarray:
    return np.asarray(value).reshape(spec.shape).astype(spec.dtype, copy=False)
