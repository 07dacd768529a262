import numpy as np
import pandas as pd

from basis.paper import PAPER_TABLE1, comparison_markdown, summarize, table_latex, table_markdown


def _runs(values):
    rows = []
    for (dataset, method), numbers in values.items():
        for seed, offset in enumerate((-0.001, 0.001)):
            rows.append({"dataset": dataset, "method": method, "seed": seed,
                         **{m: v + offset for m, v in numbers.items()}})
    return pd.DataFrame(rows)


def test_paper_table_is_complete():
    assert len(PAPER_TABLE1) == 4 * 4 * 5
    assert PAPER_TABLE1[("mnist", "basis", "nmi")] == (0.961, 0.001)
    assert PAPER_TABLE1[("cifar10", "specnet2", "d_perp")] == (4.922, 0.102)


def test_comparison_marks_what_falls_outside_two_std():
    at_paper = {m: PAPER_TABLE1[("mnist", "basis", m)][0] for m in ("d_G", "d_perp", "nmi", "acc", "accuracy")}
    far = dict(at_paper, nmi=0.5)
    summary = summarize(_runs({("mnist", "basis"): at_paper, ("mnist", "specnet1"): far}))
    text = comparison_markdown(summary)
    basis_nmi = next(line for line in text.splitlines() if "| mnist | basis | nmi |" in line)
    specnet1_nmi = next(line for line in text.splitlines() if "| mnist | specnet1 | nmi |" in line)
    assert basis_nmi.endswith("| yes |")
    assert specnet1_nmi.endswith("| **no** |") and "-0.411" in specnet1_nmi


def test_best_per_column_is_bold_in_both_tables():
    summary = summarize(_runs({("digits", "basis"): {"d_G": 0.1, "d_perp": 0.2, "nmi": 0.9, "acc": 0.9, "accuracy": 90.0},
                               ("digits", "specnet2"): {"d_G": 0.5, "d_perp": 0.1, "nmi": 0.8, "acc": 0.95, "accuracy": 80.0}}))
    md = table_markdown(summary)
    basis_row = next(l for l in md.splitlines() if "| basis |" in l)
    assert basis_row.count("**") == 2 * 3  # d_G, nmi, accuracy
    assert "\\mathbf{0.100" in table_latex(summary)
    assert np.isfinite(summary.to_numpy()).all()
