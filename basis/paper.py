"""The paper's published numbers (Table 1) and the reproduced-vs-paper comparison."""
from __future__ import annotations

import math

import pandas as pd

MEASURES = ("d_G", "d_perp", "nmi", "acc", "accuracy")
#: True where lower is better.
LOWER_IS_BETTER = {"d_G": True, "d_perp": True, "nmi": False, "acc": False, "accuracy": False}
METHOD_LABELS = {"diffusion_net": "Diffusion-Net", "specnet1": "SpecNet1", "specnet2": "SpecNet2", "basis": "BASiS (Ours)"}
DATASET_LABELS = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST", "svhn": "SVHN", "cifar10": "CIFAR-10"}

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


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample std over seeds for every (dataset, method) and measure."""
    return runs.groupby(["dataset", "method"])[list(MEASURES)].agg(["mean", "std"])


def _best_methods(summary: pd.DataFrame) -> set[tuple[str, str, str]]:
    best = set()
    for dataset in summary.index.get_level_values(0).unique():
        block = summary.loc[dataset]
        for measure in MEASURES:
            means = block[(measure, "mean")]
            if means.notna().any():
                best.add((dataset, means.idxmin() if LOWER_IS_BETTER[measure] else means.idxmax(), measure))
    return best


def table_markdown(summary: pd.DataFrame) -> str:
    best = _best_methods(summary)
    lines = ["| data set | method | " + " | ".join(MEASURES) + " |", "|---|---|" + "---|" * len(MEASURES)]
    for (dataset, method), row in summary.iterrows():
        cells = []
        for m in MEASURES:
            text = f"{row[(m, 'mean')]:.3f} ± {row[(m, 'std')]:.3f}"
            cells.append(f"**{text}**" if (dataset, method, m) in best else text)
        lines.append(f"| {dataset} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table_latex(summary: pd.DataFrame) -> str:
    best = _best_methods(summary)
    datasets = list(summary.index.get_level_values(0).unique())
    lines = [r"\begin{tabular}{ll" + "c" * len(datasets) + "}", r"\toprule",
             "Measure & Method & " + " & ".join(DATASET_LABELS.get(d, d) for d in datasets) + r" \\", r"\midrule"]
    for measure in MEASURES:
        for method in summary.index.get_level_values(1).unique():
            cells = []
            for dataset in datasets:
                if (dataset, method) not in summary.index:
                    cells.append("--")
                    continue
                row = summary.loc[(dataset, method)]
                text = f"{row[(measure, 'mean')]:.3f} \\pm {row[(measure, 'std')]:.3f}"
                cells.append(f"$\\mathbf{{{text}}}$" if (dataset, method, measure) in best else f"${text}$")
            lines.append(f"{measure.replace('_', chr(92) + '_')} & {METHOD_LABELS.get(method, method)} & " + " & ".join(cells) + r" \\")
        lines.append(r"\midrule")
    lines[-1] = r"\bottomrule"
    lines.append(r"\end{tabular}")
    return "\n".join(lines) + "\n"


def comparison_markdown(summary: pd.DataFrame) -> str:
    """Each reproduced number beside the paper's, the difference, and whether it lies
    within the paper's mean +/- 2 std. Cells the paper does not report say so."""
    lines = [
        "# Reproduced vs. paper (Table 1)", "",
        "`within 2σ`: the reproduced mean lies in the paper's mean ± 2 std. Data sets the paper does not report"
        " (digits, toy sets) have no paper number.", "",
        "| data set | method | measure | reproduced | paper | difference | within 2σ |", "|---|---|---|---|---|---|---|",
    ]
    for (dataset, method), row in summary.iterrows():
        for measure in MEASURES:
            mean, std = row[(measure, "mean")], row[(measure, "std")]
            reproduced = f"{mean:.3f} ± {std:.3f}"
            paper = PAPER_TABLE1.get((dataset, method, measure))
            if paper is None:
                lines.append(f"| {dataset} | {method} | {measure} | {reproduced} | — | — | no paper number |")
                continue
            within = abs(mean - paper[0]) <= 2 * paper[1] if not math.isnan(mean) else False
            lines.append(
                f"| {dataset} | {method} | {measure} | {reproduced} | {paper[0]:.3f} ± {paper[1]:.3f} |"
                f" {mean - paper[0]:+.3f} | {'yes' if within else '**no**'} |"
            )
    return "\n".join(lines) + "\n"
