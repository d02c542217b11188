"""What a bundle's manifest holds, asked by name: ``Bundle``'s read side (``Bundle`` adds
loading, integrity and writing in ``bundle.py``).

The model (``kind``, ``meta``, ``inputs``, ``batch``, ``source``, ...), the artifacts
(``artifact(name)``, ``has``, ``path_of``) and the sections stages read, as the typed, frozen
views of ``manifest_sections`` (``quantization``, ``step_buckets``, ``engines``,
``engine_for(runtime, precision)``, ``verification``) or, for the sections still handed back as
a dict, as a copy (``fused``, ``flow_quality``, ``decode_defaults``). Nothing here writes."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edgekit.errors import BundleError
from edgekit.manifest import live_paths, narrowed
from edgekit.manifest_sections import (
    ARTIFACT_FIELDS,
    Artifact,
    BucketGraphs,
    EngineRecord,
    QuantizationSummary,
    Verification,
    step_bucket_problem,
)
from edgekit.spec import TensorSpec, tensor_specs_from_json


class ManifestViews:
    """The read accessors of ``Bundle`` over ``self.manifest`` (checked by ``manifest_schema`` when it
    loaded). Sections come back as copies: a stage that changes one says so through
    ``Bundle.record``/``record_entry``, never by mutating what it read."""

    root: Path
    manifest: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.manifest["model"]["kind"]

    @property
    def name(self) -> str:
        return self.manifest["model"]["name"]

    @property
    def meta(self) -> dict[str, Any]:
        return self.manifest["model"]["meta"]

    @property
    def inputs(self) -> dict[str, TensorSpec]:
        return tensor_specs_from_json(self.manifest["io"]["inputs"])

    @property
    def outputs(self) -> dict[str, TensorSpec]:
        return tensor_specs_from_json(self.manifest["io"]["outputs"])

    @property
    def ground_truth(self) -> str | None:
        return self.manifest["model"].get("ground_truth")

    @property
    def source(self) -> str | None:
        """The model source the bundle was exported from (a built-in name or ``module:function``)."""
        return self.manifest["model"].get("source")

    @property
    def source_sha256(self) -> str | None:  # a file.py source's sha256 at export (None: a module)
        return self.manifest["model"].get("source_sha256")

    @property
    def condition_sampler(self) -> str | None:
        """The spec's condition sampler (``module:function``) that draws conditioning rows, if any."""
        return self.manifest["model"].get("condition_sampler")

    @property
    def conditioning(self) -> dict[str, dict[str, Any]]:
        """{conditioning input name: {"uncond": fill value or None, ...}}, in graph input order."""
        return copy.deepcopy(self.meta.get("conditioning") or {})

    @property
    def batch(self) -> int:
        """The exported graph's static batch (dim 0 of its first input): rows per network call."""
        return next(iter(self.inputs.values())).shape[0]

    @property
    def tokens_per_row(self) -> int | None:
        """Tokens one row's decode decides with the bundle's decode defaults: a masked model every
        position (meta ``seq_len``), an AR model the defaults' ``length``, else the cache's size
        (meta ``max_len``; a decode's options may ask for fewer: ``quantize.decodes.tokens_per_row``);
        None for flow."""
        key = {"masked": "seq_len", "ar": "max_len"}.get(self.kind)
        value = (self.kind == "ar" and self.decode_defaults.get("length")) or (self.meta.get(key) if key else None)
        return int(value) if value else None

    @property
    def decode_defaults(self) -> dict[str, Any]:
        """The decode settings recorded at export (``edgekit.decode.dispatch.decode_config`` input)."""
        return copy.deepcopy(self.manifest.get("decode_defaults") or {})

    @property
    def engines(self) -> dict[str, EngineRecord]:
        """{"<target>/<precision>": the engine built for it (path, runtime, compatibility keys, ...)}."""
        engines = self.manifest.get("engines") or {}
        return {k: EngineRecord.from_json(k, e) for k, e in engines.items() if isinstance(e, dict)}

    def engine_for(self, runtime: str, precision: str) -> EngineRecord | None:
        """The first engine built for ``runtime`` in ``precision`` (any target's), or None."""
        return next((e for e in self.engines.values() if e.runtime == runtime and e.precision == precision), None)

    @property
    def fused(self) -> dict[str, dict[str, Any]]:
        """{graph ("step", "unrolled", ...): fused-graph entry with the parameters it baked in}."""
        return copy.deepcopy(self.manifest.get("fused") or {})

    @property
    def quantization(self) -> QuantizationSummary | None:
        """The summary ``edgekit quantize`` recorded (profile, budget, arithmetic, ...), or None."""
        doc = self.manifest.get("quantization")
        return QuantizationSummary.from_json(doc) if isinstance(doc, dict) and doc else None

    def step_buckets(self, artifact: str = "int8") -> BucketGraphs | None:
        """The step buckets ``artifact`` was quantized with (bucket 0 is ``artifact`` itself, each
        graph's sha256 filled in), or None for a one-scale model (or another artifact). A record
        whose parts disagree (counts, order, edges, its binding) is a BundleError."""
        q = self.manifest.get("quantization")
        doc = q.get("step_buckets") if artifact == "int8" and isinstance(q, dict) else None
        if not isinstance(doc, dict) or (not doc.get("artifacts") and (doc.get("n") or 1) < 2):
            return None
        problem = step_bucket_problem(doc, artifact, lambda a: self.artifact(a).sha256 if self.has(a) else None)
        if problem is not None:
            n = max(len(doc.get("artifacts") or []), 2)
            raise BundleError(
                f"bundle {self.root}: the int8 model's step buckets {problem}",
                hint=f"re-quantize with `edgekit quantize {self.root} --step-buckets {n}`",
            )
        graphs = tuple(str(a) for a in doc["artifacts"])
        return BucketGraphs(
            len(graphs),
            doc.get("by") if isinstance(doc.get("by"), str) else None,
            tuple(float(e) for e in doc["boundaries"]),
            graphs,
            tuple(self.artifact(a).sha256 for a in graphs),
            doc.get("binding"),
        )

    @property
    def verification(self) -> dict[str, Verification]:
        """{artifact name: the export-time check of that graph against its reference}."""
        checks = self.manifest.get("verification") or {}
        return {k: Verification.from_json(v) for k, v in checks.items() if isinstance(v, dict)}

    @property
    def flow_quality(self) -> dict[str, Any] | None:
        """The (solver, steps) quality table ``run --budget-ms`` measured and stored, or None."""
        return copy.deepcopy(self.manifest.get("flow_quality")) or None

    @property
    def artifact_names(self) -> tuple[str, ...]:
        return tuple(self.manifest["artifacts"])

    def has(self, artifact: str) -> bool:
        """Whether the manifest lists ``artifact`` ("fp32", "int8", "conditions", ...)."""
        return artifact in self.manifest["artifacts"]

    def to_json(self) -> dict[str, Any]:
        """The whole manifest, a copy (``inspect``'s and ``export``'s document)."""
        return copy.deepcopy(self.manifest)

    def named_files(self) -> set[str]:
        """Every bundle-relative file the manifest names (artifacts, side files, engines, fused)."""
        return live_paths(self.manifest)

    def subset(
        self, artifacts: Iterable[str], engines: Iterable[str] | None, *, fused: bool = True, **sections: Any
    ) -> dict[str, Any]:
        """A copy of the manifest naming only ``artifacts`` and ``engines`` (None: no engines
        section), the fused graphs only if ``fused``, with ``sections`` set: what a packed bundle
        or a scratch copy holds."""
        return narrowed(self.manifest, artifacts, engines, fused=fused) | sections

    def artifact(self, name: str) -> Artifact:
        doc = self.manifest["artifacts"].get(name)
        if doc is None:
            have = ", ".join(self.manifest["artifacts"]) or "none"
            raise BundleError(
                f"bundle {self.root} has no {name!r} artifact (it has: {have})", hint=self._remake_hint(name, "first")
            )
        # Fields a newer edgekit added are not this one's business (the schema checked the known ones).
        return Artifact(name=name, **{k: doc[k] for k in ARTIFACT_FIELDS if k in doc})

    def _remake_hint(self, name: str, when: str = "again") -> str:
        """The command that (re)makes artifact ``name`` ("int8", "int8-bucket-N": quantize)."""
        if name.startswith("int8"):
            return f"run `edgekit quantize {self.root}` {when}"
        return (
            f"re-export with `edgekit export MODEL -o {self.root}`" if name == "fp32" else "run the stage that makes it"
        )

    def path_of(self, name: str) -> Path:
        return self.root / self.artifact(name).path
