"""The qnn profile's promotion search, on a stand-in whose budget holds from a known count of
16-bit tensors: the smallest count is found on the CPU simulation (doubling, then bisection) and
confirmed on the HTP backend; where the HTP backend falls short of the simulation, its shortfall
tightens the simulation's budget (a quarter more where the key is one the simulation does not
measure); a tensor the HTP backend computes unlike its simulation is left out and the count
checked again."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from edgekit.quantize.qnn.graph import GraphFacts
from edgekit.quantize.qnn.profile import QnnProfile
from edgekit.quantize.qnn.refusals import refuse
from edgekit.quantize.qnn.search import HTP_UNFIXABLE_DB, LATE_REFUSALS, SearchBounds, needed_gain_db

MANY_HTP = SearchBounds(htp=20)  # the quarter steps, past the default's two HTP decodes


def _search(
    cpu_needs: int,
    htp_needs: int,
    n: int = 100,
    max_fallback: int | None = None,
    disagree: tuple = (),
    drop=None,
    guess: int | None = None,
    bounds: SearchBounds = SearchBounds(),
    seconds_per: dict[str, float] | None = None,
    start_passes: bool = False,
    decided=None,
    kinds: dict | None = None,
    ties: dict | None = None,
    base_gap: float | None = None,
):
    """``drop(backend, count)``: the gt SNR drop (budget <= 1 dB) each backend measures; without
    it the budget holds from ``cpu_needs`` / ``htp_needs`` and neither reports a figure (as the
    HTP's check margin, which the simulation does not measure). ``seconds_per``: what each
    backend's candidate costs on the stand-in clock (none: the clock stands still)."""
    profile = QnnProfile.__new__(QnnProfile)  # promote() reads these and calls build/measure
    now = [0.0]
    profile.bounds, profile.clock = bounds, lambda: now[0]
    said: list[str] = []
    warned: list[str] = []
    profile.run = SimpleNamespace(
        cfg=SimpleNamespace(max_fallback=max_fallback),
        say=said.append,
        warn=warned.append,
        budget={"gt_snr_drop_db": 1.0},
    )
    profile.forced = []
    profile.refused, profile.refused_like = [], []
    profile.facts = GraphFacts({}, {}, (), frozenset(), kinds=kinds or {})
    profile.ties = ties or {}
    profile.base_gap_db = base_gap
    checked: list[int] = []

    def disagreeing(forced, candidates):  # the stand-in HTP: wrong wherever a tensor of ``disagree`` is promoted
        checked.append(len(candidates))
        bad = [t for t in candidates if t in disagree]
        return (bad[0], 6.0) if bad else None

    profile.disagreeing = disagreeing
    profile.refuse = lambda bad, order: refuse(profile, bad, order)
    profile.tensors = [f"t{i}" for i in range(n)]
    profile.weights = []
    profile.build = lambda promoted: tuple(promoted)
    measured = {"cpu": [], "htp": [], "order": []}

    def measure(model, promoted, backend="htp"):
        measured[backend].append(len(promoted))
        measured["order"].append(backend)
        now[0] += (seconds_per or {}).get(backend, 0.0)
        if drop is not None:
            value = drop(backend, len(promoted))
            return value <= 1.0, {"gt_snr_drop_db": value}, []
        return len(promoted) >= (cpu_needs if backend == "cpu" else htp_needs), {}, []

    profile.measure = measure
    model, promoted, passed, _, _ = profile.promote(profile.tensors, (start_passes, {}), guess, decided)  # t0 first
    measured["checked"], measured["warned"], measured["refused"] = checked, warned, profile.refused
    measured["refused_like"] = profile.refused_like
    measured["said"] = said
    return promoted, passed, measured


def test_the_smallest_passing_count_is_bisected_on_the_cpu_and_confirmed_on_the_htp():
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17)
    assert passed and promoted == [f"t{i}" for i in range(17)]  # first of the order first
    assert measured["cpu"] == [1, 2, 4, 8, 16, 32, 24, 20, 18, 17]
    assert measured["htp"] == [17]
    progress = [m for m in measured["said"] if m.startswith("simulated ")]  # one line per simulated candidate
    assert len(progress) == 10 and "17 tensor(s) at 16 bit: holds" in progress[-1] and "candidate 10 of" in progress[-1]


def test_the_htp_adds_a_quarter_more_where_it_is_stricter_than_the_simulation():
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=30, bounds=MANY_HTP)
    assert passed and len(promoted) == 32 and measured["htp"] == [17, 21, 26, 32]


def test_a_tensor_the_htp_computes_unlike_its_simulation_is_left_out_and_the_count_checked_again():
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17, disagree=("t3",))
    assert passed and promoted == [f"t{i}" for i in range(18) if i != 3]
    assert measured["refused"] == [{"tensor": "t3", "htp_below_simulation_db": 6.0}] and "t3" in measured["warned"][0]
    assert measured["cpu"] == [1, 2, 4, 8, 16, 32, 24, 20, 18, 17, 17]  # the count that held, checked once more
    assert measured["checked"] == [17, 17] and measured["htp"] == [17]


def test_a_refused_tensors_kind_is_left_at_8_bit_with_it_and_a_weights_is_not():
    """One block's Softmax output refused: every other Softmax output read by a MatMul goes with it
    (the HTP's kernels are per op), unchecked; a Softmax read by something else, and a weight whose
    kind is every MatMul's, stay in the order."""
    softmax = ("Softmax", ("MatMul",))
    kinds = {"t3": softmax, "t7": softmax, "t11": softmax, "t5": ("Softmax", ("Mul",)), "t9": ("Add", ("MatMul",))}
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17, disagree=("t3",), kinds=kinds)
    assert passed and not {"t3", "t7", "t11"} & set(promoted) and {"t5", "t9"} <= set(promoted)
    assert measured["refused"] == [{"tensor": "t3", "htp_below_simulation_db": 6.0}]
    assert measured["refused_like"] == [
        {"tensor": "t11", "like": "t3", "why": "same kind"},
        {"tensor": "t7", "like": "t3", "why": "same kind"},
    ]
    assert any("2 more Softmax output(s) read by MatMul left at 8 bit with t3" in w for w in measured["warned"])
    weight = ("initializer", ("MatMul",))
    _, _, measured = _search(cpu_needs=17, htp_needs=17, disagree=("t3",), kinds={"t3": weight, "t7": weight})
    assert measured["refused_like"] == [] and len(measured["warned"]) == 1


def test_past_the_bounds_a_few_more_refusals_then_the_prefix_that_agreed_goes_to_the_htp():
    """On a user's model each refusal after the bound cost one more bisection (3.5 min each, 12 min
    past a 6-min bound): past it, LATE_REFUSALS more are found, then the prefix the last bisection
    found agreeing is decided as it is."""
    late = SearchBounds(simulated=3)
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17, disagree=("t1", "t2", "t3", "t5"), bounds=late)
    refused = [r["tensor"] for r in measured["refused"]]
    assert refused == ["t1", "t2", "t3"] and LATE_REFUSALS == 2  # the third past the bound ends it
    assert promoted == ["t0"] and not passed and measured["htp"] == [1]  # the prefix before t3
    assert len(measured["checked"]) == 3  # no check after the last refusal
    assert any("agreed with its simulation" in line for line in measured["said"]), measured["said"]
    # Within the bound a refusal goes on searching.
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17, disagree=("t1", "t2", "t3", "t5"))
    assert passed and len(measured["refused"]) == 4 and not any("agreed with" in line for line in measured["said"])


def test_a_promotion_that_takes_a_refused_tensor_to_16_bit_is_left_at_8_bit_with_it():
    """A Gather table refused: its output, whose promotion takes the table along, goes with it (on
    a user's model it came back as one more disagreement, 3.5 min of bisection on the HTP)."""
    ties = {f"t{i}": frozenset({f"t{i}"}) for i in range(100)} | {"t8": frozenset({"t8", "t3"})}
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17, disagree=("t3",), ties=ties)
    assert passed and not {"t3", "t8"} & set(promoted)
    assert measured["refused_like"] == [{"tensor": "t8", "like": "t3", "why": "takes it to 16 bit"}]
    assert measured["checked"] == [17, 17]  # one bisection: t8 never brings t3 back


@pytest.mark.parametrize(("needs", "cpu"), [(1, [1]), (100, [1, 2, 4, 8, 16, 32, 64, 100, 82, 91, 95, 97, 98, 99])])
def test_edges_of_the_search(needs, cpu):
    promoted, passed, measured = _search(cpu_needs=needs, htp_needs=needs)
    assert passed and len(promoted) == needs and measured["cpu"] == cpu and measured["htp"] == [needs]


def test_a_budget_no_count_meets_promotes_everything_it_may_and_says_it_failed():
    promoted, passed, measured = _search(cpu_needs=1000, htp_needs=1000, max_fallback=10)
    assert not passed and len(promoted) == 10 and measured["cpu"] == [1, 2, 4, 8, 10] and measured["htp"] == [10]


def test_the_quarter_more_the_htp_asks_for_is_checked_against_the_simulation_too():
    # t20 lies past the count the CPU search found: only the HTP's quarter steps reach it.
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=30, disagree=("t20",), bounds=MANY_HTP)
    assert passed and "t20" not in promoted and len(promoted) == 32
    assert measured["refused"] == [{"tensor": "t20", "htp_below_simulation_db": 6.0}]
    assert measured["checked"][0] == 17 and 21 in measured["checked"]  # the first quarter step was checked
    assert measured["htp"] == [17, 21, 26, 32]


def test_the_htp_shortfall_tightens_the_simulations_budget_and_the_count_is_searched_again():
    # The simulation meets 1 dB from 10 promotions; the HTP backend runs 0.5 dB worse, so it needs 20.
    def drop(backend, k):
        return 10 / k + (0.5 if backend == "htp" else 0.0)

    promoted, passed, measured = _search(cpu_needs=0, htp_needs=0, drop=drop)
    assert passed and len(promoted) == 20
    assert measured["htp"] == [10, 20]  # not 10, 12, 15, 18, 22: one HTP decode to learn the offset, one to confirm
    # Galloping from 10 with the budget at 0.5 dB, then bisecting; counts measured before are not
    # measured again (12, 16: the first search; 10: the HTP's shortfall is set against its figure).
    assert measured["cpu"] == [1, 2, 4, 8, 16, 12, 10, 9] + [11, 14, 18, 26, 22, 20, 19]


def test_a_shortfall_the_simulation_cannot_close_sends_the_whole_order_to_the_htp():
    promoted, passed, measured = _search(
        cpu_needs=0, htp_needs=0, n=30, drop=lambda backend, k: 10 / k + (5.0 if backend == "htp" else 0.0)
    )
    assert not passed and len(promoted) == 30 and measured["htp"] == [10, 30]


def test_the_htps_verdict_on_the_whole_order_is_the_last_word():
    # The HTP fails on a key the simulation does not measure: quarter steps reach the limit (30),
    # which the simulation never decoded; nothing is left to search, so it does not decode it now.
    promoted, passed, measured = _search(cpu_needs=3, htp_needs=1000, n=30, bounds=MANY_HTP)
    assert not passed and len(promoted) == 30 and measured["htp"][-3:] == [22, 27, 30]
    assert measured["order"][-1] == "htp" and 30 not in measured["cpu"]


def test_a_guess_that_holds_is_walked_down_and_bisected_without_decoding_from_one():
    # The ranking predicts 20; 17 is the smallest that holds: down 20 -> 19 -> 17 -> 13 (fails), bisect (13, 17].
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17, guess=20)
    assert passed and len(promoted) == 17
    assert measured["cpu"] == [20, 19, 17, 13, 15, 16] and measured["htp"] == [17]


def test_a_guess_that_fails_gallops_up_from_itself():
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17, guess=10)
    assert passed and len(promoted) == 17 and measured["cpu"] == [10, 20, 15, 17, 16] and measured["htp"] == [17]


def test_a_forced_set_the_simulation_passes_goes_to_the_htp_with_no_search():
    promoted, passed, measured = _search(cpu_needs=0, htp_needs=0, start_passes=True)
    assert passed and promoted == [] and measured["cpu"] == [] and measured["htp"] == [0]
    assert measured["checked"] == []  # nothing promoted: nothing for the HTP to disagree on


def test_a_forced_set_the_htp_fails_where_the_simulation_passed_is_searched_on_from_there():
    # The HTP backend failed no promotion on a key the simulation does not measure (check's margin):
    # a quarter more from there, each count decided on the HTP backend, the first decode counted.
    promoted, passed, measured = _search(
        cpu_needs=0, htp_needs=3, start_passes=True, decided=(False, {}, []), bounds=SearchBounds(htp=3)
    )
    assert not passed and measured["htp"] == [1, 2]  # three HTP decodes with the forced set's
    assert measured["cpu"] == [1]  # each failing count's simulation, set against the HTP's figures
    promoted, passed, measured = _search(cpu_needs=0, htp_needs=3, start_passes=True, decided=(False, {}, []))
    assert passed and measured["htp"] == [1, 2, 3] and len(promoted) == 3


def test_the_simulated_candidate_bound_stops_the_search_with_one_line_and_the_htp_decides():
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17, bounds=SearchBounds(simulated=7))
    # 1, 2, 4, 8, 16, 32 fail or hold, 24 holds: the bound stops the bisection at 7 decodes
    assert measured["cpu"] == [1, 2, 4, 8, 16, 32, 24] and measured["htp"] == [24] and passed
    assert len(promoted) == 24
    (line,) = [m for m in measured["said"] if "search bound" in m]
    assert "7 simulated candidates" in line and "24 tensor(s)" in line


def test_the_time_bound_is_read_on_the_clock_and_no_count_that_held_sends_the_largest_decoded():
    promoted, passed, measured = _search(
        cpu_needs=50, htp_needs=50, bounds=SearchBounds(seconds=35.0), seconds_per={"cpu": 10.0, "htp": 200.0}
    )
    assert measured["cpu"] == [1, 2, 4, 8] and measured["htp"] == [8] and not passed
    assert any("none held" in m for m in measured["said"])
    assert sum("search bound" in m for m in measured["said"]) == 2  # the search's, then the HTP's verdict


def test_the_htp_decodes_are_bounded_and_the_last_verdict_stands():
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=30, bounds=SearchBounds(htp=2))
    assert not passed and measured["htp"] == [17, 21] and len(promoted) == 21
    assert any("2 HTP decode(s)" in m and "miss the budget" in m for m in measured["said"])


def test_no_htp_decode_starts_that_would_end_past_the_time_bound():
    # 120 s of search so far, then an HTP decode of 200 s: another would end at 520 s, past 400.
    promoted, passed, measured = _search(
        cpu_needs=17, htp_needs=30, bounds=SearchBounds(seconds=400.0), seconds_per={"cpu": 12.0, "htp": 200.0}
    )
    assert measured["htp"] == [17] and not passed
    assert any("1 HTP decode(s)" in m and "200 s each" in m for m in measured["said"])
    # With room for it, the second decode runs.
    _, passed, measured = _search(
        cpu_needs=17, htp_needs=21, bounds=SearchBounds(seconds=600.0), seconds_per={"cpu": 12.0, "htp": 200.0}
    )
    assert measured["htp"] == [17, 21] and passed


def test_the_gain_the_budget_needs_is_read_off_the_simulations_metrics():
    budget = {"snr_db": 30.0, "gt_snr_drop_db": 1.0, "check_margin": 0.0}
    assert needed_gain_db({"snr_db": 24.0}, budget) == pytest.approx(6.0)
    # A 3 dB drop is FP32's ground-truth error plus INT8's of equal power (10^0.3 - 1 = 1): for a
    # 1 dB drop INT8's must fall to 10^0.1 - 1 = 0.259 of that, 5.87 dB.
    assert needed_gain_db({"snr_db": 35.0, "gt_snr_drop_db": 10 * np.log10(2.0)}, budget) == pytest.approx(
        5.87, abs=0.01
    )
    assert needed_gain_db({"snr_db": 35.0, "gt_snr_drop_db": 0.5}, budget) == 0.0  # met: the larger of -5 and 0
    assert needed_gain_db({"lockstep_token_agreement": 0.9}, {"lockstep_token_agreement": 0.99}) is None
    assert needed_gain_db({"snr_db": float("nan")}, budget) is None


def test_a_promotion_the_htp_refuses_to_compile_is_found_and_left_at_8_bit():
    """A 16-bit tensor the HTP backend has no kernel for (its graph is refused: QnnCompileError)
    is found by the same bisection as one it computes wrongly, and left at 8 bit with a warning,
    instead of ending the quantize."""
    from edgekit.quantize.qnn.refusals import disagreeing, refuse
    from edgekit.runtimes.qnn_session import QnnCompileError

    class Exact:  # a runtime (its own context manager) that computes what FP32 does
        def run(self, feed):
            return {"y": feed["x"] * 2}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    feeds = [{"x": np.full((2,), i, np.float32)} for i in range(4)]
    exact = Exact()
    warned: list[str] = []
    profile = SimpleNamespace(
        run=SimpleNamespace(
            traj=SimpleNamespace(feeds=feeds),
            fp32_rt=exact,
            bundle=SimpleNamespace(outputs={"y": None}),
            say=lambda line: None,
            warn=warned.append,
        ),
        buckets=SimpleNamespace(current=None),
        build=lambda promoted: tuple(promoted),
        open_simulation=lambda model: Exact(),
        refused=[],
        refused_like=[],
        facts=GraphFacts({}, {}, (), frozenset()),
        ties={},
        base_gaps={},
        base_gap_db=None,
    )

    def open_candidate(model):
        if "t5" in model:  # the graph with t5 at 16 bit
            raise QnnCompileError("HTP v75 refused node 'Transpose_3'", hint="", findings=[])
        return Exact()

    profile.open_candidate = open_candidate
    order = [f"t{i}" for i in range(8)]
    bad = disagreeing(profile, [], order)
    assert bad == ("t5", np.inf)
    assert refuse(profile, bad, order) == ["t0", "t1", "t2", "t3", "t4", "t6", "t7"]
    assert profile.refused == [{"tensor": "t5", "htp_below_simulation_db": None, "htp_refused_graph": True}]
    assert "refuses the graph with t5 at 16 bit" in warned[0]
    assert disagreeing(profile, [], ["t0", "t1"]) is None  # a set it compiles and computes alike


def test_a_gap_the_graph_has_with_no_promotion_is_not_blamed_on_the_first_candidate():
    """On a user's model the HTP computed the graph with no promotion 22 dB below its simulation;
    judged by the whole gap, every bisection blamed the order's first candidate. A promotion is
    judged by the gap it adds to that one, measured once and said in one warning."""
    from edgekit.quantize.qnn.refusals import disagreeing

    class Shifted:  # out = 2x + shift: the simulation off by 0.1, the HTP by 0.13 (2.3 dB), by 1.0 with t5
        def __init__(self, shift=0.0):
            self.shift = shift

        def run(self, feed):
            return {"y": feed["x"] * 2 + self.shift}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    feeds = [{"x": np.full((2,), i + 1, np.float32)} for i in range(4)]
    warned: list[str] = []
    built: list[tuple] = []

    def build(promoted):
        built.append(tuple(promoted))
        return tuple(promoted)

    profile = SimpleNamespace(
        run=SimpleNamespace(
            traj=SimpleNamespace(feeds=feeds),
            fp32_rt=Shifted(),
            bundle=SimpleNamespace(outputs={"y": None}, root="bundles/m"),
            say=lambda line: None,
            warn=warned.append,
        ),
        buckets=SimpleNamespace(current=None),
        build=build,
        open_simulation=lambda model: Shifted(0.1),
        open_candidate=lambda model: Shifted(1.0 if "t5" in model else 0.13),
        base_gaps={},
        base_gap_db=None,
    )
    order = [f"t{i}" for i in range(8)]
    bad = disagreeing(profile, [], order)
    assert bad is not None and bad[0] == "t5" and bad[1] == pytest.approx(20 * np.log10(1.0 / 0.13), abs=0.1)
    assert len(warned) == 1 and "with no promotion" in warned[0]
    assert profile.base_gap_db == pytest.approx(20 * np.log10(1.3), abs=0.1)
    assert "`edgekit debug bundles/m --candidate qnn:int8`" in warned[0]  # where to look next
    assert disagreeing(profile, [], ["t0", "t1", "t2"]) is None  # the graph's own gap, nothing added
    assert built.count(()) == 1 and len(warned) == 1  # measured and said once
    # A gap past HTP_UNFIXABLE_DB blames nothing: no bisection, not even the whole set is built.
    profile.base_gaps, built[:] = {}, []
    profile.open_candidate = lambda model: Shifted(1.0)
    assert disagreeing(profile, [], order) is None and built == [()] and profile.base_gap_db > HTP_UNFIXABLE_DB


def test_a_graph_the_htp_computes_far_below_its_simulation_with_no_promotion_ends_the_search():
    """No promotion fixes an op the HTP computes unlike QDQ at 8 bit: past HTP_UNFIXABLE_DB of the
    graph's own gap the search stops and the HTP backend decides the count it has, as it is."""
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17, base_gap=22.0, disagree=())
    assert measured["htp"] == [17] and passed  # one HTP decode of the count the simulation found
    assert any("22.0 dB below its simulation with no promotion" in line for line in measured["said"])
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=30, base_gap=22.0, bounds=MANY_HTP)
    assert measured["htp"] == [17] and not passed  # no quarter more: the verdict stands
    _, _, measured = _search(cpu_needs=17, htp_needs=30, base_gap=HTP_UNFIXABLE_DB, bounds=MANY_HTP)
    assert measured["htp"] == [17, 21, 26, 32]  # at the line, the search goes on
