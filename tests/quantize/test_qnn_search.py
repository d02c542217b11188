"""The qnn profile's promotion search, on a stand-in whose budget holds from a known count of
16-bit tensors: the smallest count is found on the CPU simulation (doubling, then bisection) and
confirmed on the HTP backend, which doubles on where it is stricter."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgekit.quantize.qnn import QnnProfile


def _search(cpu_needs: int, htp_needs: int, n: int = 100, max_fallback: int | None = None):
    profile = QnnProfile.__new__(QnnProfile)  # promote() reads these and calls build/measure
    profile.run = SimpleNamespace(cfg=SimpleNamespace(max_fallback=max_fallback), say=lambda msg: None)
    profile.forced = []
    profile.tensors = [f"t{i}" for i in range(n)]
    profile.weights = []
    profile.build = lambda promoted: tuple(promoted)
    measured = {"cpu": [], "htp": []}

    def measure(model, promoted, backend="htp"):
        measured[backend].append(len(promoted))
        return len(promoted) >= (cpu_needs if backend == "cpu" else htp_needs), {}, []

    profile.measure = measure
    ranking = {t: float(i) for i, t in enumerate(profile.tensors)}  # t0 least precise
    model, promoted, passed, _, _ = profile.promote(ranking, (), False, {}, [])
    return promoted, passed, measured


def test_the_smallest_passing_count_is_bisected_on_the_cpu_and_confirmed_on_the_htp():
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=17)
    assert passed and promoted == [f"t{i}" for i in range(17)]  # least precise first
    assert measured["cpu"] == [1, 2, 4, 8, 16, 32, 24, 20, 18, 17]
    assert measured["htp"] == [17]


def test_the_htp_doubles_on_where_it_is_stricter_than_the_simulation():
    promoted, passed, measured = _search(cpu_needs=17, htp_needs=30)
    assert passed and len(promoted) == 34 and measured["htp"] == [17, 34]


@pytest.mark.parametrize(("needs", "cpu"), [(1, [1]), (100, [1, 2, 4, 8, 16, 32, 64, 100, 82, 91, 95, 97, 98, 99])])
def test_edges_of_the_search(needs, cpu):
    promoted, passed, measured = _search(cpu_needs=needs, htp_needs=needs)
    assert passed and len(promoted) == needs and measured["cpu"] == cpu and measured["htp"] == [needs]


def test_a_budget_no_count_meets_promotes_everything_it_may_and_says_it_failed():
    promoted, passed, measured = _search(cpu_needs=1000, htp_needs=1000, max_fallback=10)
    assert not passed and len(promoted) == 10 and measured["cpu"] == [1, 2, 4, 8, 10] and measured["htp"] == [10]
