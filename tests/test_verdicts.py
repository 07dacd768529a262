"""Table 1's claim as verdicts (basis.verdicts): BASiS wins, loses and ties, and every cell
gets a verdict or a reason."""

import pandas as pd

from basis.paper import MEASURES, summarize
from basis.verdicts import table1_verdicts, verdict, verdicts_markdown

SCORES = {"d_G": 0.2, "d_perp": 0.3, "nmi": 0.9, "acc": 0.9, "accuracy": 90.0}


def _summary(methods: dict[str, dict[str, float]], spread: float = 0.001, dataset: str = "mnist") -> pd.DataFrame:
    """Two seeds per method, each measure at its value -/+ ``spread`` under both variants."""
    from basis.paper import PAPER_VARIANT

    rows = []
    for method, values in methods.items():
        for seed, sign in enumerate((-1, 1)):
            numbers = {m: v + sign * spread for m, v in values.items()}
            numbers |= {PAPER_VARIANT[m]: v for m, v in numbers.items()} | {"d_G_code_skew": 0.01}
            rows.append({"dataset": dataset, "method": method, "seed": seed, **numbers})
    return summarize(pd.DataFrame(rows))


def test_basis_winning_losing_and_tying_each_get_their_verdict():
    worse = {m: v * (1.5 if m.startswith("d_") else 0.5) for m, v in SCORES.items()}
    wins = _summary({"basis": SCORES, "specnet1": worse})
    assert verdict(wins, "mnist", "d_G")["verdict"] == "holds"
    assert verdict(wins, "mnist", "nmi")["gap"] == "+0.450"
    loses = _summary({"basis": worse, "specnet1": SCORES, "specnet2": worse})
    found = verdict(loses, "mnist", "d_G")
    assert found["verdict"] == "fails" and found["best_other"] == "0.200 (specnet1)" and found["gap"] == "-0.100"
    ties = _summary({"basis": SCORES, "specnet1": {m: v * 1.001 for m, v in SCORES.items()}}, spread=0.05)
    assert verdict(ties, "mnist", "d_perp")["verdict"] == "within noise"


def test_every_cell_has_a_verdict_or_says_why_not():
    summary = _summary({"basis": SCORES, "specnet1": SCORES})
    summary.loc[("mnist", "basis"), ("d_G_code_skew", "mean")] = 0.5  # BASiS's authors' d_G is not a distance
    rows = table1_verdicts(summary, {"mnist": {"accuracy_authors": "not available: no labels"}})
    assert len(rows) == 2 * len(MEASURES) - 1  # ACC's two variants are one
    assert [r["variant"] for r in rows if r["measure"] == "acc"] == ["both"]
    by_cell = {(r["measure"], r["variant"]): r["verdict"] for r in rows}
    assert by_cell["d_G_code", "authors' code"] == "not a distance †: not ranked"
    assert by_cell["accuracy_authors", "authors' code"] == "not available: no labels"
    text = verdicts_markdown(rows)
    assert text.count("| mnist |") == len(rows) and "of 9 cells." in text


def test_a_measure_no_run_measured_is_said_so():
    summary = _summary({"basis": SCORES, "specnet1": SCORES})
    summary[("d_G_code", "mean")] = float("nan")
    assert verdict(summary, "mnist", "d_G_code")["verdict"] == "not measured"


def test_a_run_where_basis_does_not_win_says_so_in_the_markdown():
    summary = _summary({"basis": {**SCORES, "d_G": 0.4}, "specnet1": SCORES})
    text = verdicts_markdown(table1_verdicts(summary))
    line = next(row for row in text.splitlines() if row.startswith("| mnist | d_G | equation |"))
    assert "**fails**" in line and "(specnet1)" in line
