"""The chunk window of a flow model: the same network at W = C + F + A frames (static shapes).

``decode/chunked.py`` decodes an utterance F frames at a time through this graph. The window
spec is the model's own module with its frame axes (x, v, and the token input at 1/r of the
frame rate) cut to the window; a module must accept the shorter length (the demo decoder takes
its first W position embeddings; a convolutional or relatively-positioned network needs
nothing). The manifest records the geometry in ``meta["chunk"]`` and the utterance length the
model was built for in ``meta["utterance_frames"]``.
"""

from __future__ import annotations

import dataclasses

from edgekit.decode.chunked import ChunkSpec
from edgekit.errors import UsageError
from edgekit.spec import ModelSpec, TensorSpec


def window_spec(
    spec: ModelSpec, frames: int, context: int = 0, lookahead: int = 0, tokens_input: str = "tokens"
) -> ModelSpec:
    """``spec`` (a flow model) cut to the chunk window of ``frames + context + lookahead`` frames."""
    if spec.kind != "flow":
        raise UsageError(f"--chunk-frames applies to flow models; {spec.name!r} is {spec.kind!r}; drop the flag")
    r = int(spec.meta.get("frames_per_token", 1))
    chunk = ChunkSpec(frames, context, lookahead, r, tokens_input)
    total = int(spec.meta["frames"])
    W = chunk.window
    if W > total:
        raise UsageError(
            f"the chunk window ({context} + {frames} + {lookahead} = {W} "
            f"frames) exceeds the model's {total} frames; valid: <= {total}"
        )
    if tokens_input not in spec.inputs:
        raise UsageError(
            f"{spec.name!r} has no {tokens_input!r} input to slice per window; its inputs: {', '.join(spec.inputs)}"
        )

    def cut(t: TensorSpec, length: int) -> TensorSpec:
        return dataclasses.replace(t, shape=(t.shape[0], length, *t.shape[2:]))

    inputs = dict(spec.inputs)
    inputs["x"] = cut(inputs["x"], W)
    inputs[tokens_input] = cut(inputs[tokens_input], W // r)
    outputs = {name: cut(t, W) for name, t in spec.outputs.items()}
    meta = dict(spec.meta) | {
        "frames": W,
        "utterance_frames": total,
        "chunk": {
            "frames": frames,
            "context": context,
            "lookahead": lookahead,
            "tokens_input": tokens_input,
            "sigma_min": chunk.sigma_min,
        },
    }
    return dataclasses.replace(spec, inputs=inputs, outputs=outputs, meta=meta)
