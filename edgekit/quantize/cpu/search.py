"""The cpu and trt profiles' budget search: rank the INT8 nodes by sensitivity and move the most
sensitive back to float until the budget holds.

Sensitivity is measured in ``sensitivity.py`` on a few recorded feeds spread over the loop: the
noise each node adds (qdq_loss_debug's tensor-by-tensor comparison of the float and the QDQ
graph), and one layer at a time, the network output's SQNR when only that node is INT8. The
latter ranks (lowest first): local SQNR misses how far an error travels (on the flow demo the
first layer, reading the ODE state, adds 37 dB-SQNR noise locally yet alone costs the decode
5 dB). The loop ranks again when floating a node whose input was already ruined upstream (below
20 dB) brought no progress.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from edgekit.quantize.budget import check, worst_margin

# The one-layer-at-a-time measurement is one candidate (derived from the all-INT8 graph:
# cpu/derive.py) and one session per node: ~60 ms a node on the demos (every node measured: at most
# 33 weighted nodes), a session that loads the whole model per node on a 2.25 GiB model of ~200.
# Over SCREEN_NODES nodes, the single qdq_loss_debug pass (the noise each node adds) screens them
# and only the noisiest are measured alone: SCREEN_NODES, or SCREEN_LARGE once the FP32 weights
# pass LARGE_BYTES. Under LARGE_BYTES a node costs about a second, and the screen's figure is a poor
# guide to the measured one: on matcha's decoder (65 nodes, 44.6 MB) the layer measured the
# quietest of all (added 45.2 dB) costs the output 34.4 dB alone, one of the worst, and a cut at 40
# that a 0.01 dB change moved left out the feed-forward projection whose float form the budget
# needed (11 fallbacks with all 65 measured, 240 s; 43 with the cut, 288 s). So up to 128 are.
SCREEN_NODES = 128
SCREEN_LARGE = 8
# A node whose per-row figure is this far below its whole-tensor one is screened in beside them.
HIDDEN_ROWS_DB = 10.0
LARGE_BYTES = 256 * 1024**2
# Over LARGE_BYTES a fallback costs minutes (two held-out decodes of the whole model a candidate),
# and the search stops once this many fallbacks in a row bring no better worst margin than the
# best so far (unless --max-fallback bounds it: then the user's bound). On the 2.25 GiB aMUSEd
# with random weights the budget was out of reach (0.9853 -> 0.9855 -> 0.9847 -> 0.9848 ->
# 0.9848 against 0.99): every further fallback would have been ~50 s for nothing.
PATIENCE_LARGE = 3
# After this many fallbacks one at a time, the search doubles the float set per candidate while the
# budget fails and then bisects back (matcha's decoder at 400 frames: the budget held at 44 of 65
# layers, 44 candidates one by one, 13 this way).
GALLOP_AFTER = 4


def screen(scores: Mapping[str, Mapping[str, float]], nodes: Sequence[str], weight_bytes: int) -> list[str]:
    """The nodes worth measuring alone: all of them up to the screen's size, else the ones that
    add the most noise over their whole tensors (lowest added SQNR; a node the pass did not score
    counts as noisiest), plus up to a quarter more whose rows hide noise that figure does not show
    (MatMul/Gemm whose per-row figure, ``sensitivity.py``, is HIDDEN_ROWS_DB or more below it).
    Rows of small magnitude that a later norm scales back up are invisible over the tensor: Sana's
    caption projection reads the null caption's near-zero states (own Q/DQ 32 dB over the tensor,
    7.7 dB per row; alone in INT8 it cost the output 27.8 dB against the next worst's 36.9) and was
    ranked among the quietest. Where rows are alike nothing is added (interleaving the two
    rankings instead displaced matcha's decoder's noisiest layers: 14 fallbacks became over 32)."""
    size = SCREEN_LARGE if weight_bytes > LARGE_BYTES else SCREEN_NODES
    if len(nodes) <= size:
        return list(nodes)

    whole, per_row = partial(_whole, scores), partial(_per_row, scores)
    chosen = sorted(nodes, key=whole)[:size]
    hidden = [n for n in sorted(nodes, key=per_row) if n not in chosen and per_row(n) < whole(n) - HIDDEN_ROWS_DB]
    return chosen + hidden[: max(1, size // 4)]


def _whole(scores: Mapping[str, Mapping[str, float]], n: str) -> float:
    """The noise ``n`` adds over its whole tensors (added SQNR, dB); unscored: the noisiest."""
    return scores.get(n, {}).get("added_sqnr_db", -math.inf)


def _per_row(scores: Mapping[str, Mapping[str, float]], n: str) -> float:
    """``n``'s per-row figure (the lower of its added and own-Q/DQ row SQNRs), else its whole one."""
    s = scores.get(n, {})
    rows = [s[k] for k in ("row_added_sqnr_db", "row_tensor_sqnr_db") if k in s]
    return min(rows) if rows else _whole(scores, n)


def noisiest_first(scores: Mapping[str, Mapping[str, float]], nodes: Sequence[str]) -> list[str]:
    """``nodes`` by the lower of their whole-tensor and per-row figures, noisiest first: the order
    the race measures them in (``sensitivity.isolated_output_sqnr``), so that the worst is likely
    met early and few run every feed (Sana-600M: the caption projection, 10.2 dB per row, ahead of
    the eight depthwise convs at 23.6-26.0 dB over their tensors)."""
    return sorted(nodes, key=lambda n: min(_whole(scores, n), _per_row(scores, n)))


def rank_by_sensitivity(scores: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Node names, most sensitive first: the ones measured alone by their one-layer-at-a-time
    output SQNR (lowest first), then the rest (screened out, or none measured) by the added SQNR
    of qdq_loss_debug."""
    alone = sorted(
        (n for n in scores if "isolated_output_sqnr_db" in scores[n]),
        key=lambda n: scores[n]["isolated_output_sqnr_db"],
    )
    rest = sorted(
        (n for n in scores if "isolated_output_sqnr_db" not in scores[n]),
        key=lambda n: scores[n].get("added_sqnr_db", float("-inf")),
    )
    return alone + rest


# ---- the fallback loop -------------------------------------------------------------------------
@dataclass
class BudgetOutcome:
    passed: bool
    metrics: dict[str, Any]
    checks: list[dict[str, Any]]
    quantized: list[str]  # INT8 nodes of the final model
    fallback: list[dict[str, Any]] = field(default_factory=list)  # moved out of INT8, in order, with why
    history: list[dict[str, Any]] = field(default_factory=list)  # metrics after each iteration
    ranking: dict[str, dict[str, float]] = field(default_factory=dict)
    # the INT8 nodes the loop would have moved next, in its own (last) ranking: the fallback form
    # (cpu/form.py) may try weight-only with one or two of them added
    next_up: list[str] = field(default_factory=list)
    stopped: str | None = None  # why the search stopped before the budget held or the nodes ran out


def fallback_until_within_budget(
    selected: Sequence[str],
    budget: Mapping[str, float],
    build: Callable[[list[str]], Path],
    measure: Callable[[Path], dict[str, Any]],
    sensitivity: Callable[[Path, list[str]], dict[str, dict[str, float]]],
    *,
    enabled: bool = True,
    max_fallback: int | None = None,
    patience: int | None = None,
    labels: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    fallback_to: str = "float",
    first: tuple[Path, Mapping[str, Any]] | None = None,
) -> tuple[Path, BudgetOutcome]:
    """Quantize ``selected``; while the budget fails, move the most sensitive INT8 nodes back to
    float and re-measure, until it holds or nothing is left (or ``max_fallback`` nodes moved, or
    ``patience`` steps in a row set no better worst margin than the best so far): one node a step
    for the first ``GALLOP_AFTER``, then doubling the float set, and where a doubling held, bisecting
    back to the fewest of the ranking that hold. Ranked on the first failing model; ranked again
    only when floating a node whose input was already ruined brought no progress.

    build(nodes) -> QDQ model path; measure(path) -> metrics; sensitivity(path, nodes) -> scores.
    fallback_to: what ``build`` makes of a node left out ("float", or "weight-only" where it keeps
    INT8 weights): only the progress messages say it. ``first``: the all-INT8 model of ``selected``
    and its metrics where the caller judged it already (``method.choose_method``)."""
    say = progress or (lambda message: None)
    nodes = list(selected)
    model, metrics = first if first is not None else (build(nodes), None)
    metrics = dict(metrics) if metrics is not None else measure(model)
    passed, rows = check(metrics, budget)
    history = [{"fallback": 0, "int8_nodes": len(nodes), **_headline(metrics, budget), "passed": passed}]
    outcome = BudgetOutcome(passed, metrics, rows, nodes, history=history)
    if passed or not enabled or not nodes or max_fallback == 0:  # --max-fallback 0: no ranking to pay for
        return model, outcome
    say(f"budget not met ({_describe(rows)}): ranking {len(nodes)} INT8 nodes by sensitivity")
    scores = sensitivity(model, nodes)
    outcome.ranking = dict(scores)
    search = _Floats(nodes, budget, build, measure, outcome, dict(labels or {}), say, fallback_to)
    search.rank(scores)
    limit = len(nodes) if max_fallback is None else min(max_fallback, len(nodes))
    judged, failed_at = search.grow(model, metrics, rows, limit, patience, sensitivity)
    if judged.passed and len(search.floated) - failed_at > 1:
        judged = search.bisect(failed_at, judged)
    outcome.passed, outcome.metrics, outcome.checks = judged.passed, judged.metrics, judged.rows
    outcome.quantized = [n for n in nodes if n not in search.floated]
    outcome.next_up = [n for n in search.order if n in outcome.quantized]
    return judged.model, outcome


@dataclass(frozen=True)
class _Judged:
    model: Path
    metrics: dict[str, Any]
    rows: list[dict[str, Any]]
    passed: bool


@dataclass
class _Floats:
    """The fallback search's state: the nodes moved out of INT8 (``floated``, in order) and the
    ranking of the rest (``order``)."""

    selected: list[str]
    budget: Mapping[str, float]
    build: Callable[[list[str]], Path]
    measure: Callable[[Path], dict[str, Any]]
    outcome: BudgetOutcome
    labels: dict[str, str]
    say: Callable[[str], None]
    fallback_to: str
    floated: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    scores: dict[str, dict[str, float]] = field(default_factory=dict)

    def rank(self, scores: Mapping[str, Mapping[str, float]]) -> None:
        kept = [n for n in self.selected if n not in self.floated]
        self.scores.update({k: dict(v) for k, v in scores.items()})
        self.order = rank_by_sensitivity(scores) + [n for n in kept if n not in scores]

    def judge(self, count: int) -> _Judged:
        """The candidate with the first ``count`` floated nodes out of INT8, measured and recorded."""
        kept = [n for n in self.selected if n not in set(self.floated[:count])]
        model = self.build(kept)
        metrics = self.measure(model)
        passed, rows = check(metrics, self.budget)
        self.outcome.history.append(
            {
                "fallback": count,
                "node": self.floated[count - 1],
                "int8_nodes": len(kept),
                **_headline(metrics, self.budget),
                "passed": passed,
            }
        )
        return _Judged(model, metrics, rows, passed)

    def take(self, count: int) -> list[str]:
        """Move the next ``count`` ranked nodes out of INT8, each recorded with why."""
        step, self.order = self.order[:count], self.order[count:]
        for name in step:
            self.floated.append(name)
            why = f"budget fallback #{len(self.floated)}: " + ranked_why(self.scores.get(name, {}))
            label = self.labels.get(name, name)
            self.outcome.fallback.append({"node": name, "label": label, "reason": why, **self.scores.get(name, {})})
            if count == 1:
                self.say(f"fallback {len(self.floated)}: {label} -> {self.fallback_to} ({why})")
        if count > 1:
            lead = len(self.floated) - count + 1
            shown = ", ".join(self.labels.get(n, n) for n in step[:3]) + (", ..." if count > 3 else "")
            self.say(
                f"fallbacks {lead}-{len(self.floated)} -> {self.fallback_to}: the next {count} in the ranking "
                f"({shown}); the float set doubles while the budget fails, then halves back to the fewest that hold it"
            )
        return step

    def grow(
        self,
        model: Path,
        metrics: dict[str, Any],
        rows: list[dict[str, Any]],
        limit: int,
        patience: int | None,
        sensitivity: Callable[[Path, list[str]], dict[str, dict[str, float]]],
    ) -> tuple[_Judged, int]:
        """Float nodes until the budget holds, ``limit`` is reached or ``patience`` runs out:
        (the last candidate judged, the most fallbacks known to miss the budget)."""
        judged = _Judged(model, metrics, rows, False)
        best, stale, failed_at = worst_margin(metrics, self.budget), 0, 0
        while len(self.floated) < limit:
            # One at a time first (a few sensitive layers is the common case), then doubling: 44 of
            # matcha's 65 layers took 44 candidates one by one.
            size = 1 if len(self.floated) < GALLOP_AFTER else len(self.floated)
            step = self.take(min(limit, len(self.floated) + size) - len(self.floated))
            judged = self.judge(len(self.floated))
            if judged.passed or len(self.floated) == len(self.selected):
                break
            failed_at = len(self.floated)
            margin = worst_margin(judged.metrics, self.budget)
            stale = 0 if margin > best else stale + 1
            if patience is not None and stale >= patience and len(self.floated) < limit:
                self.outcome.stopped = (
                    f"{stale} fallbacks in a row brought no better worst margin than {best:+.4g}: the budget looks "
                    f"out of reach by fallbacks (--max-fallback N searches on, up to N)"
                )
                self.say(f"search stopped: {self.outcome.stopped}")
                break
            last = self.scores.get(step[-1], {})
            if len(step) == 1 and margin <= best and last.get("input_sqnr_db", math.inf) < _BROKEN_INPUT_DB:
                # No progress, and that node's input was already ruined upstream: its score said
                # little. Rank again on the current model, where the earlier culprit is gone.
                self.say("no progress: ranking the remaining INT8 nodes again")
                scores = sensitivity(judged.model, [n for n in self.selected if n not in self.floated])
                self.outcome.ranking.update(scores)
                self.rank(scores)
            best = max(best, margin)
        return judged, failed_at

    def bisect(self, low: int, held: _Judged) -> _Judged:
        """A doubling step held the budget: the fewest fallbacks between ``low`` (which missed)
        and all of them that hold (more float never hurts, as a rule); the rest back in INT8,
        first in line for the fallback form."""
        high = len(self.floated)
        while high - low > 1:
            mid = (low + high) // 2
            self.say(f"bisect: {mid} fallbacks (between {low}, which missed, and {high}, which held)")
            trial = self.judge(mid)
            low, high, held = (low, mid, trial) if trial.passed else (mid, high, held)
        self.order = self.floated[high:] + self.order
        del self.floated[high:], self.outcome.fallback[high:]
        self.say(f"fallbacks: {high} hold the budget, {high - 1} do not")
        return held


def ranked_why(score: Mapping[str, float]) -> str:
    if "isolated_output_sqnr_db" in score:
        feeds, of = score.get("isolated_feeds"), score.get("isolated_of")
        raced = f" (raced: on {feeds:g} of {of:g} feeds)" if feeds is not None and of is not None and feeds < of else ""
        return f"alone in INT8 it leaves {score['isolated_output_sqnr_db']:.1f} dB output SQNR{raced}"
    if "added_sqnr_db" in score:
        return f"adds noise at {score['added_sqnr_db']:.1f} dB SQNR"
    return "unranked"


# Below this input SQNR a node's "added noise" estimate is dominated by upstream error.
_BROKEN_INPUT_DB = 20.0


def _headline(metrics: Mapping[str, Any], budget: Mapping[str, float]) -> dict[str, Any]:
    return {k: metrics.get(k) for k in budget}


def _describe(rows: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(
        f"{r['key']} {r['value']:.4g} {'<' if r['op'] == '>=' else '>'} {r['limit']:g}"
        for r in rows
        if r["passed"] is False
    )
