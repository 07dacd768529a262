"""The report a reader opens last: one self-contained HTML page per config that says at a
glance what reproduced.

In order: a tally (Table 1's cells and the other claims by verdict); Table 1 in the paper's
layout (a block of methods per measure, a column per data set, the paper's number under
ours, BASiS's verdict as a colour and a word); the other claims, each with its figure; the
data sets the paper does not report, in a compact table; and, folded away, how each number
was computed (the full comparison text). Every number of ours links to its MLflow run.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from basis.catalog import DATASET_LABELS, METHOD_LABELS
from basis.estimators.parameters import PAPER_METHODS
from basis.paper import (
    MEASURES,
    NOT_A_DISTANCE,
    NOT_AVAILABLE,
    PAPER_ROW,
    PAPER_TABLE1,
    PAPER_VARIANT,
    markdown_to_html,
    mean_std,
    not_a_distance,
    seed_count,
)
from basis.verdicts import claims_tally

#: Table 1's measures as the paper names them.
MEASURE_LABELS = {"d_G": "d_G ↓", "d_perp": "d_⊥ ↓", "nmi": "NMI ↑", "acc": "ACC ↑", "accuracy": "Accuracy (%) ↑"}
#: A Table 1 cell's verdict (:func:`basis.verdicts.verdict`) -> its word in the report.
CELL_VERDICTS = ("holds", "fails", "within noise", "not measured")
#: The other claims' verdicts, in the tally's order.
CLAIM_VERDICTS = ("reproduced", "not reproduced", "not measured here")
_COLOURS = {
    "holds": "#d4f0d4",
    "reproduced": "#d4f0d4",
    "fails": "#f6d0d0",
    "not reproduced": "#f6d0d0",
    "within noise": "#fbeec2",
    "not measured": "#e8e8e8",
    "not measured here": "#e8e8e8",
}
_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;"
    "text-align:left;vertical-align:top}th{background:#f4f4f4}.paper{color:#666;font-size:.85em;display:block}"
    ".word{font-size:.8em;font-weight:600;display:block}.tally td{font-size:1.1em}"
    "img.figure{max-width:420px}details{margin:1em 0}summary{cursor:pointer;font-weight:600}"
)


def _slug(verdict: str) -> str:
    """A verdict as a CSS class name."""
    return verdict.replace(" ", "-")


STYLE = _STYLE + "".join(f".v-{_slug(verdict)}{{background:{colour}}}" for verdict, colour in _COLOURS.items())


@dataclass(frozen=True)
class RunLink:
    """Where a number of ours was logged: its MLflow run, and the UI's address of that run
    where a tracking server's (or UI's) address is known."""

    run_id: str
    experiment_id: str
    ui: str | None = None

    def href(self) -> str | None:
        if self.ui is None:
            return None
        return f"{self.ui.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"


def cell_verdict(text: str) -> str:
    """A Table 1 verdict's word (:data:`CELL_VERDICTS`): every reason for none is "not measured"."""
    return next((word for word in CELL_VERDICTS[:3] if text.startswith(word)), "not measured")


def table1_tally(verdicts: list[dict], datasets: list[str], paper: bool = True) -> dict[str, int]:
    """Table 1's cells by verdict (the paper's variant, one per data set and measure): of the
    paper's data sets (a paper data set this config did not run counts as not measured), or,
    with ``paper=False``, of the config's other data sets."""
    tally = dict.fromkeys(CELL_VERDICTS, 0)
    for dataset in DATASET_LABELS if paper else [d for d in datasets if d not in DATASET_LABELS]:
        for measure in MEASURES:
            found = _paper_variant_verdict(verdicts, dataset, measure) if dataset in datasets else None
            tally[cell_verdict(found["verdict"]) if found else "not measured"] += 1
    return tally


def _paper_variant_verdict(verdicts: list[dict], dataset: str, measure: str) -> dict | None:
    """The verdict of ``measure`` on ``dataset`` in the variant the paper's number came from,
    or by the equation where the runs have no such variant (not the authors' evaluation)."""
    found = {row["measure"]: row for row in verdicts if row["dataset"] == dataset}
    coded = found.get(PAPER_VARIANT[measure])
    if coded is not None and coded["verdict"] != "not measured":
        return coded
    return found.get(measure, coded)


def _number(row: pd.Series, column: str) -> str:
    """A mean ± std cell, the seed count where some seeds lack it, and † where not a distance."""
    text = mean_std(row[column, "mean"], row[column, "std"]) + seed_count(row, column)
    if column == "d_G_code" and not_a_distance(row):
        text += f" {NOT_A_DISTANCE}"
    return text


def _linked(text: str, link: RunLink | None) -> str:
    """``text`` linking to its run's page, or titled with the run's id where no UI address is known."""
    if link is None:
        return html.escape(text)
    href = link.href()
    if href is None:
        return f'<span title="MLflow run {link.run_id}" data-run="{link.run_id}">{html.escape(text)}</span>'
    return f'<a href="{html.escape(href)}" data-run="{link.run_id}">{html.escape(text)}</a>'


def _column(summary: pd.DataFrame, dataset: str, measure: str) -> str:
    """The column that is set against the paper's number: its variant where the runs have it."""
    variant = PAPER_VARIANT[measure]
    block = summary.loc[dataset]
    if (variant, "mean") in block.columns and block[variant, "mean"].notna().any():
        return variant
    return measure


def table1_html(
    summary: pd.DataFrame,
    verdicts: list[dict],
    unavailable: dict[str, dict[str, str]],
    links: dict[tuple[str, str], RunLink],
) -> str:
    """Table 1 as the paper lays it out: per measure a block of methods, a column per data
    set; ours on top, the paper's number under it, BASiS's verdict as a colour and a word."""
    datasets = list(summary.index.get_level_values(0).unique())
    ran = [d for d in DATASET_LABELS if d in datasets]
    methods = list(dict.fromkeys([*(m for m in METHOD_LABELS if any(m == r for _, r in summary.index))]))
    methods = methods or list(PAPER_METHODS)
    head = "".join(f"<th>{DATASET_LABELS[d]}</th>" for d in DATASET_LABELS)
    rows = [f"<table class='table1'><thead><tr><th>measure</th><th>method</th>{head}</tr></thead><tbody>"]
    for measure in MEASURES:
        for index, method in enumerate(methods):
            cells = []
            for dataset in DATASET_LABELS:
                paper = PAPER_TABLE1.get((dataset, PAPER_ROW.get(method, method), measure))
                under = f"<span class='paper'>paper {paper[0]:.3f} ± {paper[1]:.3f}</span>" if paper else ""
                if dataset not in ran or (dataset, method) not in summary.index:
                    word = "<span class='word'>not run in this config</span>" if method == "basis" else ""
                    cells.append(f"<td class='v-not-measured'>–{under}{word}</td>")
                    continue
                column = _column(summary, dataset, measure)
                if column in unavailable.get(dataset, {}):
                    shown = f"{NOT_AVAILABLE}<span class='word'>{html.escape(unavailable[dataset][column])}</span>"
                else:
                    shown = _linked(_number(summary.loc[(dataset, method)], column), links.get((dataset, method)))
                css, word = "", ""
                if method == "basis":
                    found = _paper_variant_verdict(verdicts, dataset, measure)
                    word = cell_verdict(found["verdict"]) if found else "not measured"
                    css = f" class='v-{_slug(word)}' title='{html.escape(found['verdict'] if found else word)}'"
                    word = f"<span class='word'>{word}</span>"
                cells.append(f"<td{css}>{shown}{under}{word}</td>")
            label = f"<th rowspan='{len(methods)}'>{MEASURE_LABELS[measure]}</th>" if index == 0 else ""
            rows.append(f"<tr>{label}<td>{METHOD_LABELS.get(method, method)}</td>{''.join(cells)}</tr>")
    rows.append("</tbody></table>")
    return "".join(rows)


def other_datasets_html(summary: pd.DataFrame, verdicts: list[dict], links: dict[tuple[str, str], RunLink]) -> str:
    """The data sets the paper does not report (digits, toy sets, one's own): a row per data
    set and method, Table 1's measures by the paper's equations, BASiS's verdict (in the
    paper's variant where the runs computed it) as a colour and a word."""
    own = [(d, m) for d, m in summary.index if d not in DATASET_LABELS]
    if not own:
        return ""
    head = "".join(f"<th>{MEASURE_LABELS[m]}</th>" for m in MEASURES)
    rows = [f"<table class='others'><thead><tr><th>data set</th><th>method</th>{head}</tr></thead><tbody>"]
    for dataset, method in own:
        row = summary.loc[(dataset, method)]
        cells = ""
        for measure in MEASURES:
            shown, css = _linked(_number(row, measure), links.get((dataset, method))), ""
            found = _paper_variant_verdict(verdicts, dataset, measure) if method == "basis" else None
            if found is not None:
                word = cell_verdict(found["verdict"])
                css = f" class='v-{_slug(word)}' title='{html.escape(found['verdict'])}'"
                shown += f"<span class='word'>{word}</span>"
            cells += f"<td{css}>{shown}</td>"
        rows.append(f"<tr><td>{html.escape(dataset)}</td><td>{METHOD_LABELS.get(method, method)}</td>{cells}</tr>")
    rows.append("</tbody></table>")
    return "".join(rows)


def _picture(path: Path | None) -> str:
    """A PNG inlined as a data URI, so that the page is one file."""
    if path is None or not Path(path).exists():
        return ""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"<img class='figure' alt='{html.escape(Path(path).stem)}' src='data:image/png;base64,{data}'>"


def claims_html(rows: list[dict], figures: dict[str, Path]) -> str:
    """One row per claim beyond Table 1: the paper's words, the criterion, what was measured,
    the verdict as a colour and a word, and the figure that shows it (``figures``: the
    claim's ``figure`` -> its PNG)."""
    parts = ["<table class='claims'><thead><tr><th>claim (paper)</th><th>measured</th><th>verdict</th>"]
    parts.append("<th>figure</th></tr></thead><tbody>")
    for row in rows:
        reproduced = row["reproduced"]
        word = "not measured here" if isinstance(reproduced, str) else CLAIM_VERDICTS[0 if reproduced else 1]
        why = f"<span class='paper'>{html.escape(reproduced)}</span>" if isinstance(reproduced, str) else ""
        parts.append(
            f"<tr><td>{html.escape(row['claim'])}<span class='paper'>{html.escape(row['criterion'])}</span></td>"
            f"<td>{html.escape(row['measured'])}</td><td class='v-{_slug(word)}'>{word}{why}</td>"
            f"<td>{_picture(figures.get(row.get('figure', '')))}</td></tr>"
        )
    parts.append("</tbody></table>")
    return "".join(parts)


def tally_html(table1: dict[str, int], claims: dict[str, int], others: dict[str, int], names: list[str]) -> str:
    """The page's first lines: how many Table 1 cells (of the paper's data sets, and of the
    config's others, ``names``) and other claims came out which way."""

    def cells(counts: dict[str, int]) -> str:
        return "".join(f"<td class='v-{_slug(k)}'>{v} {k}</td>" for k, v in counts.items())

    rows = [f"<tr><th>Table 1 (BASiS best, {sum(table1.values())} cells)</th>{cells(table1)}</tr>"]
    if names:
        label = f"Table 1 on {', '.join(map(html.escape, names))} ({sum(others.values())} cells, no paper number)"
        rows.append(f"<tr><th>{label}</th>{cells(others)}</tr>")
    rows.append(f"<tr><th>other claims ({sum(claims.values())})</th>{cells(claims)}<td></td></tr>")
    return f"<table class='tally'><tbody>{''.join(rows)}</tbody></table>"


def report_html(
    name: str,
    summary: pd.DataFrame,
    verdicts: list[dict],
    unavailable: dict[str, dict[str, str]],
    claims: list[dict],
    figures: dict[str, Path],
    links: dict[tuple[str, str], RunLink],
    details: str,
) -> str:
    """The whole page (see the module); ``details`` is the comparison's markdown, shown folded."""
    datasets = list(summary.index.get_level_values(0).unique())
    body = [
        f"<h1>BASiS reproduction: config {html.escape(name)}</h1>",
        tally_html(
            table1_tally(verdicts, datasets),
            claims_tally(claims),
            table1_tally(verdicts, datasets, paper=False),
            [d for d in datasets if d not in DATASET_LABELS],
        ),
        "<h2>Table 1</h2>",
        "<p>Ours over the config's seeds (mean ± std), the paper's number under it, in the variant that"
        " produced the paper's number where the runs computed it. BASiS's cell says whether it is the best"
        " method beyond two standard deviations of the seeds. Each number links to its MLflow run.</p>",
        table1_html(summary, verdicts, unavailable, links),
        "<h2>The other claims</h2>",
        claims_html(claims, figures),
    ]
    others = other_datasets_html(summary, verdicts, links)
    if others:
        body += ["<h2>Data sets the paper does not report</h2>", others]
    inner = markdown_to_html(details).split("<body>", 1)[1].rsplit("</body>", 1)[0]
    body.append(f"<details><summary>How each number was computed</summary>{inner}</details>")
    head = f"<head><meta charset='utf-8'><title>BASiS reproduction: {html.escape(name)}</title>"
    return f"<!DOCTYPE html><html>{head}<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n"
