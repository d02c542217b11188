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

from collections.abc import Mapping, Sequence
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
    where a region input was not captured on the candidate. Captures each step's values once."""

    def __init__(
        self, fp32: Path, topo: Topology, traj: Trajectory, ref: Tapped, cand: Tapped, tmp: Path, threads: int = 0
    ):
        onnx = require("onnx")
        # The graph alone (weights in a side file stay there: each cut reads its own from it).
        self.model = onnx.shape_inference.infer_shapes(load_onnx(fp32, "artifact 'fp32'"))
        self.fp32 = fp32
        self.topo, self.traj, self.ref, self.cand, self.tmp, self.threads = topo, traj, ref, cand, tmp, threads
        self.inputs = {i.name for i in self.model.graph.input}
        self.constants = {i.name for i in self.model.graph.initializer} | set(topo.exact) - self.inputs
        self._step: int | None = None
        self._values: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray], Mapping[str, np.ndarray]]] = []
        self._cut = 0

    def _capture(self, step: int) -> None:
        if self._step == step:
            return
        self._values = []
        for i in self.traj.calls_of(step):
            feeds = self.traj.feeds[i]
            r = {k: np.array(v, copy=True) for k, v in self.ref.runtime.run(feeds).items()}
            c = {k: np.array(v, copy=True) for k, v in self.cand.runtime.run(feeds).items()}
            self._values.append((r, c, feeds))
        self._step = step

    def own_db(self, step: int, op: Op, tensor: str) -> float | None:
        self._capture(step)
        captured = set(self.cand.names) & set(self.ref.names)
        ops = region(self.topo, op, captured)
        made = {o for n in ops for o in n.outputs}
        needed = [i for n in ops for i in n.inputs if i and i not in made and i not in self.constants]
        needed = list(dict.fromkeys(needed))
        if any(i not in self.inputs and i not in captured for i in needed):
            return None
        with self._session(needed, tensor) as rt:
            signal = noise = 0.0
            for r, c, feeds in self._values:
                fed = {i: _cast(feeds[i] if i in self.inputs else c[self.cand.names[i]], rt.inputs[i]) for i in needed}
                alone = np.asarray(rt.run(fed)[tensor], np.float64)
                ref = np.asarray(r[self.ref.names[tensor]], np.float64)
                got = np.asarray(c[self.cand.names[tensor]], np.float64).reshape(alone.shape)
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


def _cast(value: np.ndarray, spec: Any) -> np.ndarray:
    return np.asarray(value).reshape(spec.shape).astype(spec.dtype, copy=False)
