"""Table 1's headline claim as verdicts: that BASiS gives the best value of the methods.

Per data set, measure and variant (the paper's equation, and the authors' code that produced
the paper's numbers, :data:`basis.paper.PAPER_VARIANT`), BASiS's mean over seeds is set
against the best mean of the other methods of the run (a baseline's published-code rows
among them). The gap counts when it exceeds the seeds'
spread: two standard deviations of the noisier of the two (sample std over seeds). A
verdict is "holds" (BASiS better beyond the spread), "fails" (worse beyond it), "within
noise", or says why there is none: a measure not available on the data set (no labels), a
value not measured (the authors' d_G needs their evaluation), or a column-normalised d_G
that is not a distance (†), which is never ranked.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

from basis.catalog import DATASET_LABELS
from basis.paper import ALL_MEASURES, LOWER_IS_BETTER, MEASURES, NOT_A_DISTANCE, PAPER_VARIANT, not_a_distance

if TYPE_CHECKING:  # the report reads certificates; it needs no eigensolver (nor torch)
    from basis.spectral.certificate import Certificate

#: Marks a d_G or d_perp measured against a reference whose subspace is not determined.
NOT_DETERMINED = "‡"

#: How many standard deviations of the seeds a gap must exceed to count.
SPREAD_STDS = 2.0


def _ranked(summary: pd.DataFrame, dataset: str, column: str) -> dict[str, tuple[float, float]]:
    """Each method's (mean, std) of ``column`` on ``dataset``, measured and, for the authors'
    d_G, a distance."""
    block = summary.loc[dataset]
    values = {}
    for method, row in block.iterrows():
        mean = row[(column, "mean")]
        if math.isnan(mean) or (column == "d_G_code" and not_a_distance(row)):
            continue
        values[method] = (mean, row[(column, "std")])
    return values


def verdict(summary: pd.DataFrame, dataset: str, column: str, why_missing: str | None = None) -> dict[str, str]:
    """BASiS against the best other method on one column of one data set (see the module)."""
    row = {"dataset": dataset, "measure": column, "basis": "—", "best_other": "—", "gap": "—", "spread": "—"}
    if why_missing is not None:
        return row | {"verdict": why_missing}
    if "basis" not in summary.loc[dataset].index:
        return row | {"verdict": "no BASiS run"}
    ranked = _ranked(summary, dataset, column)
    if "basis" not in ranked:
        basis_row = summary.loc[(dataset, "basis")]
        skewed = column == "d_G_code" and not math.isnan(basis_row[(column, "mean")])
        return row | {"verdict": f"not a distance {NOT_A_DISTANCE}: not ranked" if skewed else "not measured"}
    others = {method: value for method, value in ranked.items() if method != "basis"}
    if not others:
        return row | {"verdict": "no other method measured"}
    lower = LOWER_IS_BETTER[column]
    best = min(others, key=lambda m: others[m][0]) if lower else max(others, key=lambda m: others[m][0])
    (ours, our_std), (theirs, their_std) = ranked["basis"], others[best]
    advantage = (theirs - ours) if lower else (ours - theirs)  # > 0: BASiS better
    stds = [s for s in (our_std, their_std) if not math.isnan(s)]
    spread = SPREAD_STDS * max(stds) if stds else float("nan")
    if not math.isnan(spread) and abs(advantage) <= spread:
        outcome = "within noise"
    else:
        outcome = "holds" if advantage > 0 else "fails" if advantage < 0 else "within noise"
        outcome += " (one seed: no spread)" if math.isnan(spread) else ""
    return row | {
        "basis": f"{ours:.3f}",
        "best_other": f"{theirs:.3f} ({best})",
        "gap": f"{advantage:+.3f}",
        "spread": "—" if math.isnan(spread) else f"{spread:.3f}",
        "verdict": outcome,
    }


def table1_verdicts(summary: pd.DataFrame, unavailable: dict[str, dict[str, str]] | None = None) -> list[dict]:
    """A verdict for every data set, measure and variant of Table 1, none left out (one for
    a measure that the authors' code computes by its equation: ACC)."""
    unavailable = unavailable or {}
    rows = []
    for dataset in summary.index.get_level_values(0).unique():
        for measure in MEASURES:
            variants = [("equation", measure), ("authors' code", PAPER_VARIANT[measure])]
            if PAPER_VARIANT[measure] == measure:
                variants = [("both", measure)]
            for variant, column in variants:
                found = verdict(summary, dataset, column, unavailable.get(dataset, {}).get(column))
                rows.append(found | {"variant": variant})
    return rows


def verdicts_markdown(rows: list[dict]) -> str:
    """The verdicts as a section of the comparison."""
    lines = [
        "## Table 1's claim: BASiS gives the best value",
        "",
        "BASiS's mean against the best other method's (published-code rows included); `gap` is how much better"
        " BASiS is (negative: worse),"
        f" and it counts when it exceeds `2σ`, {SPREAD_STDS:g} standard deviations of the seeds of the noisier"
        f" of the two. A value marked {NOT_A_DISTANCE} is not a distance and is not ranked.",
        "",
        "| data set | measure | variant | BASiS | best other | gap | 2σ | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        text = row["verdict"]
        shown = f"**{text}**" if text.startswith("fails") else text
        lines.append(
            f"| {row['dataset']} | {row['measure']} | {row['variant']} | {row['basis']} | {row['best_other']}"
            f" | {row['gap']} | {row['spread']} | {shown} |"
        )
    counts = {key: sum(r["verdict"].startswith(key) for r in rows) for key in ("holds", "fails", "within noise")}
    lines += ["", ", ".join(f"{key}: {count}" for key, count in counts.items()) + f" of {len(rows)} cells."]
    return "\n".join(lines) + "\n"


def undetermined_truths(certificates: dict[str, Certificate | None]) -> dict[str, dict[str, str]]:
    """The d_G and d_perp cells (every variant) of each data set whose reference's subspace
    is not determined, with the reason, in :func:`not_available`'s form: such a value is
    not a measurement, so it is shown n/a and never ranked."""
    cells = {}
    for dataset, certificate in certificates.items():
        if certificate is not None and not certificate.determined:
            why = (
                f"{NOT_DETERMINED} the reference's subspace is not determined (eigengap {certificate.eigengap:.1e},"
                f" d_G bound {certificate.d_G_bound:.1e}): not a measurement"
            )
            cells[dataset] = {m: why for m in ALL_MEASURES if LOWER_IS_BETTER[m]}
    return cells


def merge_unavailable(*sources: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Cells that cannot be shown, from several reasons (the first reason a cell has wins)."""
    merged: dict[str, dict[str, str]] = {}
    for source in sources:
        for dataset, cells in source.items():
            merged[dataset] = {**cells, **merged.get(dataset, {})}
    return merged


def certificates_markdown(certificates: dict[str, Certificate | None]) -> str:
    """One line per data set on the ground truth every d_G and d_perp is measured against:
    its reference's certificate (:class:`~basis.spectral.certificate.Certificate`), or that
    the stored file predates certificates."""
    lines = ["## The ground truth (each data set's reference embedding)", ""]
    for dataset, certificate in certificates.items():
        label = DATASET_LABELS.get(dataset, dataset)
        if certificate is None:
            lines.append(f"- {label}: not certified (stored before references carried a certificate; recompute it)")
        else:
            lines.append(f"- {label}: {certificate.summary()}")
    undetermined = [d for d, c in certificates.items() if c is not None and not c.determined]
    if undetermined:
        lines += [
            "",
            f"{NOT_DETERMINED} The eigengap after the K-th eigenvalue of {', '.join(undetermined)} is too small for its"
            " subspace to be determined (Davis-Kahan bound on d_G above 1e-6): its d_G and d_perp are not"
            " measurements and are marked so.",
        ]
    return "\n".join(lines) + "\n"


def claims_markdown(rows: list[dict[str, str]]) -> str:
    """One line per quantitative claim: the paper's words, the criterion, the measured
    value and the verdict."""
    tally = claims_tally(rows)
    lines = [
        "# Reproduced vs. paper: the other claims",
        "",
        f"{tally['reproduced']} reproduced, {tally['not reproduced']} not reproduced,"
        f" {tally['not measured here']} not measured here (a time limit measures the machine, not the method).",
        "",
        "| claim (paper) | criterion | measured | verdict |",
        "|---|---|---|---|",
    ]
    for row in rows:
        verdict = _claim_verdict(row["reproduced"])
        if verdict == "not measured here":
            verdict += f" ({row['reproduced']})"
        lines.append(f"| {row['claim']} | {row['criterion']} | {row['measured']} | {verdict} |")
    return "\n".join(lines) + "\n"


def _claim_verdict(reproduced: bool | str) -> str:
    """A claim row's ``reproduced``: True, False, or why it was not measured here."""
    if isinstance(reproduced, str):
        return "not measured here"
    return "reproduced" if reproduced else "**not reproduced**"


def claims_tally(rows: list[dict]) -> dict[str, int]:
    """How many claims were reproduced, not reproduced, and not measured here."""
    tally = {"reproduced": 0, "not reproduced": 0, "not measured here": 0}
    for row in rows:
        tally[_claim_verdict(row["reproduced"]).strip("*")] += 1
    return tally
