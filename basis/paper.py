"""The paper's published numbers (Table 1) and the reproduced-vs-paper comparison."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from basis.catalog import DATASET_LABELS, METHOD_LABELS

#: Table 1's measures by the paper's equations (the probe: ours, trained to convergence).
MEASURES = ("d_G", "d_perp", "nmi", "acc", "accuracy")
#: For each measure, the variant that produced the paper's Table 1 numbers: the authors'
#: code (their d_G under their evaluation protocol, unsquared d_perp, arithmetic-mean NMI,
#: their linear probe). ``d_G_code`` exists only for runs with ``evaluation: authors``.
PAPER_VARIANT = {
    "d_G": "d_G_code",
    "d_perp": "d_perp_code",
    "nmi": "nmi_code",
    "acc": "acc",
    "accuracy": "accuracy_authors",
}
#: Every column summarised over seeds; SpecNet2's own-basis d_G is NaN for the other methods.
ALL_MEASURES = (
    *MEASURES,
    *(v for v in PAPER_VARIANT.values() if v not in MEASURES),
    "d_G_colnorm",
    "d_perp_colnorm",
    "d_G_code_skew",
    "d_G_own_basis",
)
#: The authors' variants in the order their table shows them: a column-normalised d_G is
#: shown beside the output's own skew (d_perp_colnorm), which says whether it is a distance.
CODE_COLUMNS = ("d_G_code", "d_perp_colnorm", "d_perp_code", "nmi_code", "acc", "accuracy_authors")
#: Marks a column-normalised d_G that is not a distance (see :func:`not_a_distance`).
NOT_A_DISTANCE = "†"
#: True where lower is better.
LOWER_IS_BETTER = {m: m.startswith(("d_G", "d_perp")) for m in ALL_MEASURES}


def not_a_distance(row: pd.Series) -> bool:
    """Whether a summary row's ``d_G_code`` is not a distance: in one of its seeds (or on
    average) a basis is skewed beyond :data:`basis.metrics.SKEW_LIMIT` (``d_G_code_skew``) or
    the value is negative (see :func:`summarize`). Such a value is marked and never bolded,
    ranked or compared, however many seeds it has."""
    from basis.metrics import SKEW_LIMIT

    nan = float("nan")
    skew = max(row.get(("d_G_code_skew", "mean"), nan), row.get(("d_G_code_skew", "max"), nan))
    return skew > SKEW_LIMIT or row.get(("d_G_code", "min"), nan) < 0  # False on NaN


_T1 = {  # measure -> method -> (mnist, fashion_mnist, svhn, cifar10) as (mean, std)
    "d_G": {
        "diffusion_net": [(0.204, 0.058), (0.488, 0.238), (1.909, 0.238), (1.022, 0.250)],
        "specnet1": [(0.386, 0.074), (0.375, 0.132), (3.526, 0.529), (2.256, 0.471)],
        "specnet2": [(1.388, 0.262), (1.976, 0.210), (1.903, 0.242), (2.970, 0.682)],
        "basis": [(0.107, 0.038), (0.284, 0.073), (1.656, 0.170), (0.803, 0.085)],
    },
    "d_perp": {
        "diffusion_net": [(0.535, 0.365), (0.823, 0.664), (1.532, 0.354), (2.957, 1.837)],
        "specnet1": [(6.296, 0.922), (6.384, 0.899), (4.507, 0.821), (5.169, 0.775)],
        "specnet2": [(9.486, 0.001), (8.561, 1.397), (4.104, 0.269), (4.922, 0.102)],
        "basis": [(0.247, 0.076), (0.590, 0.144), (0.488, 0.098), (0.407, 0.095)],
    },
    "nmi": {
        "diffusion_net": [(0.944, 0.041), (0.759, 0.085), (0.645, 0.016), (0.466, 0.034)],
        "specnet1": [(0.911, 0.008), (0.761, 0.011), (0.665, 0.018), (0.443, 0.012)],
        "specnet2": [(0.925, 0.012), (0.759, 0.010), (0.701, 0.009), (0.466, 0.013)],
        "basis": [(0.961, 0.001), (0.798, 0.001), (0.736, 0.001), (0.501, 0.001)],
    },
    "acc": {
        "diffusion_net": [(0.944, 0.030), (0.781, 0.179), (0.687, 0.303), (0.620, 0.062)],
        "specnet1": [(0.963, 0.005), (0.815, 0.029), (0.811, 0.039), (0.637, 0.029)],
        "specnet2": [(0.966, 0.007), (0.801, 0.023), (0.813, 0.015), (0.606, 0.039)],
        "basis": [(0.986, 0.001), (0.865, 0.003), (0.880, 0.001), (0.688, 0.001)],
    },
    "accuracy": {
        "diffusion_net": [(95.508, 1.449), (86.207, 0.196), (86.850, 1.386), (67.316, 2.112)],
        "specnet1": [(92.278, 4.776), (84.123, 1.229), (85.154, 0.377), (65.336, 0.626)],
        "specnet2": [(97.026, 0.546), (85.953, 0.240), (87.469, 0.130), (67.093, 0.644)],
        "basis": [(98.522, 0.065), (87.202, 0.187), (88.021, 0.064), (68.887, 0.128)],
    },
}
PAPER_TABLE1: dict[tuple[str, str, str], tuple[float, float]] = {
    (dataset, method, measure): values[i]
    for measure, by_method in _T1.items()
    for method, values in by_method.items()
    for i, dataset in enumerate(DATASET_LABELS)
}


def mean_std(mean: float, std: float, plus_minus: str = " ± ") -> str:
    """``mean ± std`` to three decimals; the mean alone where one run gives no spread, and
    a dash where nothing was measured (e.g. the alignment error without alignment)."""
    if math.isnan(mean):
        return "–"
    if math.isnan(std):
        return f"{mean:.3f}"
    return f"{mean:.3f}{plus_minus}{std:.3f}"


#: How a table shows a measure that a data set cannot have (NMI without labels).
NOT_AVAILABLE = "n/a"


def not_available(metrics: Iterable[tuple[str, dict]]) -> dict[str, dict[str, str]]:
    """Data set -> measure -> why it is not available, from ``(data set, metrics.json)`` pairs."""
    found: dict[str, dict[str, str]] = {}
    for dataset, values in metrics:
        found.setdefault(dataset, {}).update(values.get("not_available", {}))
    return {dataset: reasons for dataset, reasons in found.items() if reasons}


def _unavailable_note(unavailable: dict[str, dict[str, str]]) -> list[str]:
    """The footnote that says why cells read n/a."""
    reasons: dict[str, set[str]] = {}
    for dataset, by_measure in unavailable.items():
        for measure, why in by_measure.items():
            reasons.setdefault(why, set()).add(f"{dataset} {measure}")
    return [f"{NOT_AVAILABLE}: {why} ({', '.join(sorted(cells))})." for why, cells in sorted(reasons.items())]


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std and number of seeds for every (dataset, method) and measure, and the
    seeds' largest ``d_G_code_skew`` and lowest ``d_G_code``: one seed that is not a distance
    makes its mean one that must not be ranked (:func:`not_a_distance`)."""
    runs = runs.reindex(columns=[*runs.columns, *(m for m in ALL_MEASURES if m not in runs.columns)])
    seeds = runs.groupby(["dataset", "method"])
    summary = seeds[list(ALL_MEASURES)].agg(["mean", "std", "count"])
    summary["d_G_code_skew", "max"] = seeds["d_G_code_skew"].max()
    summary["d_G_code", "min"] = seeds["d_G_code"].min()
    return summary


def seed_count(row: pd.Series, measure: str) -> str:
    """`` (2 of 3 seeds)`` where fewer of the row's seeds measured ``measure`` than others."""
    counts = {m: row[m, "count"] for m, stat in row.index if stat == "count"}
    most = max(counts.values(), default=0)
    return f" ({counts[measure]:.0f} of {most:.0f} seeds)" if 0 < counts.get(measure, most) < most else ""


def _best_methods(summary: pd.DataFrame, measures: tuple[str, ...] = MEASURES) -> set[tuple[str, str, str]]:
    best = set()
    for dataset in summary.index.get_level_values(0).unique():
        block = summary.loc[dataset]
        for measure in measures:
            means = block[(measure, "mean")]
            if measure == "d_G_code":  # only values that are distances take part
                means = means[[not not_a_distance(row) for _, row in block.iterrows()]]
            if means.notna().any():
                best.add((dataset, means.idxmin() if LOWER_IS_BETTER[measure] else means.idxmax(), measure))
    return best


def table_markdown(summary: pd.DataFrame, unavailable: dict[str, dict[str, str]] | None = None) -> str:
    """Table 1 twice: by the paper's equations, then in the variants of the authors' code
    that produced the paper's numbers (see :data:`PAPER_VARIANT`), their column-normalised
    d_G beside the output's skew and marked where it is not a distance. ``unavailable``
    (:func:`not_available`): the cells a data set cannot have, shown n/a with the reason."""
    unavailable = unavailable or {}
    sections = [
        ("By the paper's equations (probe: converged logistic regression)", MEASURES),
        ("As the authors' code computed them (the variants behind the paper's numbers)", CODE_COLUMNS),
    ]
    lines = []
    for title, measures in sections:
        best = _best_methods(summary, measures)
        lines += [
            f"### {title}",
            "",
            "| data set | method | " + " | ".join(measures) + " |",
            "|---|---|" + "---|" * len(measures),
        ]
        for (dataset, method), row in summary.iterrows():
            cells = []
            for m in measures:
                text = mean_std(row[(m, "mean")], row[(m, "std")]) + seed_count(row, m)
                if m in unavailable.get(dataset, {}):
                    text = NOT_AVAILABLE
                if m == "d_G_code" and not_a_distance(row):
                    text += f" {NOT_A_DISTANCE}"
                cells.append(f"**{text}**" if (dataset, method, m) in best else text)
            lines.append(f"| {dataset} | {method} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(
        f"{NOT_A_DISTANCE} not a distance: the output's or the aligned reference's columns are skewed"
        " (d_G_code_skew, the larger d_perp_colnorm of the two, above 0.1 in a seed) or a seed's value"
        " is negative, so the column-normalised mean is not ranked. d_G_code is the authors' computation: it needs"
        " `evaluation: authors` (a dash otherwise)."
    )
    lines += _unavailable_note(unavailable)
    return "\n".join(lines) + "\n"


def table_latex(summary: pd.DataFrame) -> str:
    best = _best_methods(summary)
    datasets = list(summary.index.get_level_values(0).unique())
    lines = [
        r"\begin{tabular}{ll" + "c" * len(datasets) + "}",
        r"\toprule",
        "Measure & Method & " + " & ".join(DATASET_LABELS.get(d, d) for d in datasets) + r" \\",
        r"\midrule",
    ]
    for measure in MEASURES:
        for method in summary.index.get_level_values(1).unique():
            cells = []
            for dataset in datasets:
                if (dataset, method) not in summary.index:
                    cells.append("--")
                    continue
                row = summary.loc[(dataset, method)]
                text = mean_std(row[(measure, "mean")], row[(measure, "std")], r" \pm ")
                cells.append(f"$\\mathbf{{{text}}}$" if (dataset, method, measure) in best else f"${text}$")
            lines.append(
                f"{measure.replace('_', chr(92) + '_')} & {METHOD_LABELS.get(method, method)} & "
                + " & ".join(cells)
                + r" \\"
            )
        lines.append(r"\midrule")
    lines[-1] = r"\bottomrule"
    lines.append(r"\end{tabular}")
    return "\n".join(lines) + "\n"


#: Methods compared with another method's paper numbers: the published-code runs of a
#: baseline with the paper's row of that baseline (the paper ran its authors' code).
PAPER_ROW = {"specnet1_published": "specnet1", "specnet1_published_paper_graph": "specnet1"}
#: Which rows are the baselines' own code, and why the others are not.
PUBLISHED_CODE = (
    "## Baselines: re-implemented and as their published code runs them\n\n"
    "`specnet1` is SpectralNet's algorithm re-implemented here on the paper's graph (k = 50, local scale from"
    " the 7th neighbour) with the protocol's batch, learning rate and iterations and an exact float64"
    " orthonormalisation. `specnet1_published` runs the authors' maintained package (`spectralnet` 1.1.0)"
    " with its own defaults: its graph (30 neighbours, each point's scale the median of its distances to them),"
    " its loss on the unnormalised Laplacian, 30 epochs over 90 % of the training set with a"
    " learning-rate schedule on the other 10 %, batches of 1,024, lr 1e-3; `specnet1_published_paper_graph`"
    " the same with the paper's k and scale rule as far as the package's API takes them (its local scale stays"
    " the median distance). Both are scored by the same metrics and protocol, and set against the paper's"
    " SpecNet1 numbers, which came from the authors' code. Diffusion Net's published code (TensorFlow 1"
    " scripts) and SpecNet2's (research scripts) have no maintained package, so their rows are the"
    " re-implementations only."
)


def comparison_markdown(summary: pd.DataFrame, unavailable: dict[str, dict[str, str]] | None = None) -> str:
    """Each paper number beside ours in the variant that produced it (the authors' code)
    and ours by the paper's equation; the difference and whether ours lies within the
    paper's mean +/- 2 std are for the same variant. Cells the paper does not report say so,
    and so do those a data set cannot have (``unavailable``, :func:`not_available`)."""
    unavailable = unavailable or {}
    lines = [
        "# Reproduced vs. paper (Table 1)",
        "",
        "The paper's numbers come from the authors' code, whose measures differ from the paper's equations:"
        " d_G on column-normalised (not orthonormalised) bases against the test set's analytic embedding"
        " mapped into the base batch's embedding through 25 test anchors per class by their RANSAC"
        " (`d_G_code`, from runs with `evaluation: authors`), d_perp on column-normalised outputs and not"
        " squared, NMI with the arithmetic-mean normaliser, and a linear probe (Adam, lr 1e-4, 100 epochs)"
        " that barely trains. A column-normalised d_G is a distance only between orthonormal bases: where"
        f" either basis is skewed (d_G_code_skew above 0.1 in a seed, shown beside it) or a seed's value is"
        f" negative, it is marked {NOT_A_DISTANCE} and not compared."
        " `ours, same variant`"
        " is computed that way and is what `difference` and `within 2σ` compare; `ours, paper's equation`"
        " follows the equations (and a converged probe). Data sets the paper does not report (digits, toy sets)"
        " have no paper number.",
        "",
        "| data set | method | measure | paper | ours, same variant | difference | within 2σ"
        " | ours, paper's equation |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(row: pd.Series, measure: str) -> str:
        return mean_std(row[(measure, "mean")], row[(measure, "std")]) + seed_count(row, measure)

    for (dataset, method), row in summary.iterrows():
        for measure in MEASURES:
            variant = PAPER_VARIANT[measure]
            same, equation = f"{cell(row, variant)} ({variant})", f"{cell(row, measure)} ({measure})"
            if variant == "d_G_code" and not_a_distance(row):
                same += f" {NOT_A_DISTANCE}"
            paper = PAPER_TABLE1.get((dataset, PAPER_ROW.get(method, method), measure))
            missing = unavailable.get(dataset, {})
            if variant in missing:  # nothing to compare with the paper's number, and why
                equation = NOT_AVAILABLE if measure in missing else equation
                verdict = f"{'no paper number; ' if paper is None else ''}{missing[variant]}"
                shown = "—" if paper is None else f"{paper[0]:.3f} ± {paper[1]:.3f}"
                lines.append(
                    f"| {dataset} | {method} | {measure} | {shown} | {NOT_AVAILABLE} | — | {verdict} | {equation} |"
                )
                continue
            if paper is None:
                lines.append(f"| {dataset} | {method} | {measure} | — | {same} | — | no paper number | {equation} |")
                continue
            mean = row[(variant, "mean")]
            if variant == "d_G_code" and not_a_distance(row):
                skew, lowest = row.get(("d_G_code_skew", "max"), mean), row.get(("d_G_code", "min"), mean)
                lines.append(
                    f"| {dataset} | {method} | {measure} | {paper[0]:.3f} ± {paper[1]:.3f} | {same} | — |"
                    f" not a distance (seeds' largest skew {skew:.3f}, lowest value {lowest:.3f}) | {equation} |"
                )
                continue
            within = abs(mean - paper[0]) <= 2 * paper[1] if not math.isnan(mean) else False
            lines.append(
                f"| {dataset} | {method} | {measure} | {paper[0]:.3f} ± {paper[1]:.3f} | {same} |"
                f" {mean - paper[0]:+.3f} | {'yes' if within else '**no**'} | {equation} |"
            )
    lines += ["", PUBLISHED_CODE]
    own = [
        (dataset, row)
        for (dataset, method), row in summary.iterrows()
        if method == "specnet2" and not math.isnan(row[("d_G_own_basis", "mean")])
    ]
    if own:
        lines += [
            "",
            "## SpecNet2 scored in its own basis",
            "",
            "SpecNet2 learns the generalised eigenvectors of (W, D), which are D^-1/2 U for the eigenvectors U of"
            " L_N that every method is scored against (the paper's claim that they share eigenvectors holds for the"
            " random walk, not for L_N). So the paper-faithful d_G keeps a floor even for an exact network. The"
            " corrected score maps SpecNet2's output by D^1/2 of the test graph and re-orthonormalises it.",
            "",
            "| data set | d_G, paper-faithful | d_G, own basis (corrected) |",
            "|---|---|---|",
        ]
        lines += [f"| {dataset} | {cell(row, 'd_G')} | {cell(row, 'd_G_own_basis')} |" for dataset, row in own]
    return "\n".join(lines) + "\n"


# -- the other experiments --------------------------------------------------------------------
SWEEP_MEASURES = ("d_G", "d_perp", "nmi", "acc")
#: The ablation's measures: the sweep's, the output's skew, how well the batches were aligned
#: (RMS error of the clean anchors over their RMS norm; median and worst batch of a run), and
#: RANSAC's flags (batches it ended short of its confidence, fallbacks to least squares).
ABLATION_MEASURES = (
    *SWEEP_MEASURES,
    "d_perp_colnorm",
    "alignment_error_median",
    "alignment_error_max",
    "ransac_unsure_batches",
    "ransac_fallbacks",
)
#: Seeds below which an ablation verdict is only indicative.
ABLATION_MIN_SEEDS = 3


def sweep_summary(runs: pd.DataFrame, by: str, measures: tuple[str, ...] = SWEEP_MEASURES) -> pd.DataFrame:
    """Mean and std over seeds per method and value of ``by`` (e.g. ``n_neighbors``),
    as flat columns ``<measure>_mean`` / ``<measure>_std`` plus ``n_runs``; a measure no
    run has is NaN."""
    runs = runs.reindex(columns=[*runs.columns, *(m for m in measures if m not in runs.columns)])
    grouped = runs.groupby(["method", by])
    summary = grouped[list(measures)].agg(["mean", "std"])
    summary.columns = [f"{measure}_{stat}" for measure, stat in summary.columns]
    summary["n_runs"] = grouped.size()
    return summary.reset_index()


def knn_robustness(summary: pd.DataFrame) -> pd.DataFrame:
    """Per method, the std across k of the mean of each measure (Fig. 5's claim)."""
    return (
        summary.groupby("method")[[f"{m}_mean" for m in SWEEP_MEASURES]]
        .std()
        .rename(columns=lambda c: c.replace("_mean", "_std_across_k"))
    )


def ablation_markdown(summary: pd.DataFrame) -> str:
    """BASiS with RANSAC, plain least squares and no alignment, side by side, with how well
    each aligned its batches (RMS error of the clean anchors over their RMS norm)."""
    columns = (
        "d_G",
        "d_perp",
        "d_perp_colnorm",
        "nmi",
        "acc",
        "alignment_error_median",
        "alignment_error_max",
        "ransac_unsure_batches",
        "ransac_fallbacks",
    )
    lines = [
        "| data set | alignment | runs | d_G | d_perp | d_perp_colnorm | NMI | ACC | alignment error, median batch"
        " | alignment error, worst batch | batches RANSAC was unsure of | RANSAC fallbacks |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    for _, row in summary.sort_values(["dataset", "alignment"]).iterrows():
        cells = [mean_std(row[f"{m}_mean"], row[f"{m}_std"]) for m in columns]
        lines.append(f"| {row['dataset']} | {row['alignment']} | {int(row['n_runs'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def paper_claims(
    studies: dict[str, dict[str, dict[str, float]]], knn: pd.DataFrame, ablation: pd.DataFrame
) -> list[dict[str, str]]:
    """Each claim of Secs. 3-5 beyond Table 1, checked against the measured numbers: each
    study's own (``studies``: study -> run -> metrics, checked by the claims function its
    module declares, shown beside the study's first figure), then the kNN sweep's and the
    ablation's."""
    from basis.studies import study_function, study_module

    rows = []
    for name, results in studies.items():
        figures = study_module(name).STUDY.figures
        shown = {"figure": figures[0].name} if figures else {}
        rows += [shown | row for row in study_function(name, "claims")(results)]
    robustness = knn_robustness(knn)
    for measure in ("nmi", "acc", "d_G"):
        column = robustness[f"{measure}_std_across_k"]
        others = ", ".join(f"{m} {v:.4f}" for m, v in column.items() if m != "basis")
        rows.append(
            {
                "claim": f"Fig. 5: BASiS is the most robust to k ({measure})",
                "figure": "fig5_knn_sensitivity",
                "criterion": f"BASiS has the smallest std across k of the mean {measure}",
                "measured": f"basis {column.get('basis', float('nan')):.4f}; {others}",
                "reproduced": "basis" in column and column.idxmin() == "basis",
            }
        )
    for dataset, block in ablation.groupby("dataset"):
        block = block.set_index("alignment")
        d_G = block["d_G_mean"]
        if {"ransac", "none"} <= set(d_G.index):
            rows.append(
                {
                    "claim": f"Sec. 3 (ablation, {dataset}): batches must be aligned to learn the eigenspace",
                    "criterion": "d_G with RANSAC alignment below d_G without alignment",
                    "measured": ", ".join(f"{a} {v:.3f}" for a, v in d_G.items()),
                    "reproduced": d_G["ransac"] < d_G["none"],
                }
            )
        if {"ransac-outliers", "lstsq-outliers"} <= set(d_G.index):
            pair = ("ransac-outliers", "lstsq-outliers")
            seeds = int(min(block.at[a, "n_runs"] for a in pair)) if "n_runs" in block else 0
            few = f" ({seeds} seed(s): indicative only)" if seeds < ABLATION_MIN_SEEDS else ""
            error, skew = block["alignment_error_median_mean"], block["d_perp_colnorm_mean"]

            def cell(alignment: str, measure: str, block=block) -> str:
                return mean_std(block.at[alignment, f"{measure}_mean"], block.at[alignment, f"{measure}_std"])

            rows.append(
                {
                    "claim": f"Sec. 4.1 (ablation, {dataset}): RANSAC makes the alignment robust to anchor outliers",
                    "criterion": "with gross anchor outliers (beyond the paper: its runs had none), RANSAC's alignment"
                    " error (clean anchors, median batch) and its output's skew (d_perp_colnorm) both below plain"
                    " least squares', as means over seeds. Not d_G: least squares shrinks every map by a steady"
                    f" factor, which leaves the span, and so d_G, where it was{few}",
                    "measured": "; ".join(
                        f"{a}: alignment error {cell(a, 'alignment_error_median')}, d_perp_colnorm"
                        f" {cell(a, 'd_perp_colnorm')}, d_G {cell(a, 'd_G')}"
                        for a in pair
                    ),
                    "reproduced": bool(error[pair[0]] < error[pair[1]] and skew[pair[0]] < skew[pair[1]]),
                }
            )
    return rows


def markdown_to_html(text: str) -> str:
    """The markdown this module writes (headings, paragraphs, pipe tables, **bold**,
    `code`) as a standalone HTML page, for the Snakemake report, which shows HTML inline."""
    import html
    import re

    def inline(line: str) -> str:
        line = html.escape(line)
        line = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", line)
        return re.sub(r"`(.+?)`", r"<code>\1</code>", line)

    parts, rows = [], []

    def close_table() -> None:
        if rows:
            head, *body = rows
            parts.append(
                "<table><thead><tr>"
                + "".join(f"<th>{inline(c)}</th>" for c in head)
                + "</tr></thead><tbody>"
                + "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>" for row in body)
                + "</tbody></table>"
            )
            rows.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= set("-:") for cell in cells):  # the header separator row
                rows.append(cells)
            continue
        close_table()
        heading = re.match(r"(#{1,4}) (.*)", line)
        if heading:
            level = len(heading.group(1))
            parts.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
        elif line.strip():
            parts.append(f"<p>{inline(line)}</p>")
    close_table()
    style = "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
    head = f"<head><meta charset='utf-8'><style>{style}</style></head>"
    return f"<!DOCTYPE html><html>{head}<body>{''.join(parts)}</body></html>\n"
