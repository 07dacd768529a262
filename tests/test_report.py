"""The report a reader opens last (basis/report.py): the tally first, Table 1 in the paper's
layout with the paper's number under ours, each number linked to its MLflow run, the other
claims beside their figures, no NaN; and the page as a browser shows it."""

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from basis.paper import summarize
from basis.report import RunLink, report_html, table1_tally
from basis.verdicts import table1_verdicts

METHODS = ("diffusion_net", "specnet1", "specnet2", "basis")


def _runs(n_seeds: int = 3) -> pd.DataFrame:
    """MNIST (a paper data set) and digits (not one): BASiS best on MNIST by a wide margin."""
    rng = np.random.default_rng(0)
    rows = []
    for dataset in ("mnist", "digits"):
        for method in METHODS:
            good = method == "basis"
            for seed in range(n_seeds):
                noise = 0.001 * rng.standard_normal()
                rows.append(
                    {
                        "dataset": dataset,
                        "method": method,
                        "seed": seed,
                        "d_G": (0.1 if good else 0.5) + noise,
                        "d_perp": (0.2 if good else 0.9) + noise,
                        "nmi": (0.96 if good else 0.90) + noise,
                        "acc": (0.98 if good else 0.93) + noise,
                        "accuracy": (98.0 if good else 95.0) + noise,
                    }
                )
    return pd.DataFrame(rows)


@pytest.fixture
def page(tmp_path):
    summary = summarize(_runs())
    verdicts = table1_verdicts(summary)
    figure = tmp_path / "fig5_knn_sensitivity.png"
    plt.figure(figsize=(2, 2))
    plt.plot([0, 1], [1, 0])
    plt.savefig(figure)
    plt.close()
    claims = [
        {
            "claim": "Fig. 5: BASiS is the most robust to k (nmi)",
            "criterion": "smallest std",
            "measured": "basis 0.01",
            "reproduced": True,
            "figure": "fig5_knn_sensitivity",
        },
        {
            "claim": "Beyond the paper (scale): fit time",
            "criterion": "flat",
            "measured": "not measured here",
            "reproduced": "basis ran past 300 s on this machine",
        },
        {"claim": "Fig. 4: the bunny", "criterion": "d_G below 0.2", "measured": "d_G 0.4", "reproduced": False},
    ]
    links = {key: RunLink(f"run{i:02d}", "7", "https://mlflow.example:5000") for i, key in enumerate(summary.index)}
    text = report_html("quick", summary, verdicts, {}, claims, {figure.stem: figure}, links, "# details\n\nhow")
    out = tmp_path / "report.html"
    out.write_text(text)
    return out, summary


def test_the_tally_comes_first_and_counts_every_cell_of_the_papers_table1(page):
    html, _ = page
    text = html.read_text()
    tally = text.split("<h2>Table 1</h2>")[0]
    # MNIST's five measures, BASiS best beyond the seeds' spread; the other 15 paper cells not run
    assert "5 holds" in tally and "0 fails" in tally and "15 not measured" in tally
    assert "1 reproduced" in tally and "1 not reproduced" in tally and "1 not measured here" in tally
    # digits, which the paper does not report: its own row of the tally, and its verdicts in its table
    assert "Table 1 on digits (5 cells, no paper number)</th><td class='v-holds'>5 holds</td>" in tally
    others = text.split("<table class='others'>")[1].split("</table>")[0]
    assert others.count("<span class='word'>holds</span>") == 5


def test_table1_has_the_papers_layout_with_the_papers_number_under_ours(page):
    html, summary = page
    table = html.read_text().split("<table class='table1'>")[1].split("</table>")[0]
    head = re.findall(r"<th>([^<]+)</th>", table.split("</thead>")[0])
    assert head[2:] == ["MNIST", "Fashion-MNIST", "SVHN", "CIFAR-10"]
    rows = table.split("<tr>")[2:]
    assert len(rows) == 5 * len(METHODS)  # a block of methods per measure
    assert "d_G ↓" in rows[0]  # the first block, its label spanning its rows
    basis_d_G = next(row for row in rows[: len(METHODS)] if "BASiS" in row)
    mean, std = summary.loc[("mnist", "basis"), ("d_G", "mean")], summary.loc[("mnist", "basis"), ("d_G", "std")]
    assert f"{mean:.3f} ± {std:.3f}" in basis_d_G and "paper 0.107 ± 0.038" in basis_d_G
    assert "class='v-holds'" in basis_d_G and "<span class='word'>holds</span>" in basis_d_G
    assert basis_d_G.count("not run in this config") == 3 and "not run" not in rows[0]
    assert "digits" not in table  # the paper does not report it: it has a table of its own


def test_every_number_links_to_its_run_and_nothing_reads_nan(page):
    html, summary = page
    text = html.read_text()
    linked = set(re.findall(r'<a href="https://mlflow.example:5000/#/experiments/7/runs/(run\d\d)"', text))
    assert linked == {f"run{i:02d}" for i in range(len(summary))}
    assert "nan" not in text.lower().replace("nanx", "")
    assert "data:image/png;base64," in text  # the claim's figure, in the one file


def test_a_run_without_a_ui_address_is_named_by_its_id():
    summary = summarize(_runs(1))
    links = {key: RunLink("abc123", "7") for key in summary.index}
    text = report_html("tiny", summary, table1_verdicts(summary), {}, [], {}, links, "")
    assert 'title="MLflow run abc123"' in text and "href" not in text.split("<h2>Table 1</h2>")[1]


def test_a_paper_data_set_not_run_counts_as_not_measured():
    summary = summarize(_runs().query("dataset == 'digits'"))
    assert table1_tally(table1_verdicts(summary), ["digits"]) == {
        "holds": 0,
        "fails": 0,
        "within noise": 0,
        "not measured": 20,
    }


def test_the_report_in_a_browser_shows_the_tally_the_table_and_the_links(page, browser):
    html, _ = page
    dom = browser(html.as_uri(), "report/report-unit")
    assert "5 holds" in dom and "paper 0.107 ± 0.038" in dom
    assert dom.count('href="https://mlflow.example:5000/#/experiments/7/runs/') >= 5 * 8


def test_a_runs_embedding_picture_is_readable(tmp_path):
    """Ten well separated classes whose first two coordinates put eight of them on one point:
    the picture spreads them on the embedding's principal axes, at a readable size, with a
    colour and a legend entry per class and the run's scores in its title."""
    from PIL import Image

    from basis.studies.figures import CLUSTER_COLOURS, embedding_picture, principal_plane

    labels = np.repeat(np.arange(10), 30)
    embedding = np.eye(10)[labels] + 0.01 * np.random.default_rng(0).standard_normal((300, 10))
    first_two = np.array([embedding[labels == c, :2].mean(axis=0) for c in range(10)])
    assert len({tuple(np.round(m, 1)) for m in first_two}) == 3  # the corner the old picture showed
    plane = principal_plane(embedding)
    means = np.array([plane[labels == c].mean(axis=0) for c in range(10)])
    gaps = np.linalg.norm(means[:, None] - means[None], axis=-1)[np.triu_indices(10, 1)]
    assert (gaps > 0.05).sum() >= 40  # most pairs of classes lie apart
    out = tmp_path / "embedding.png"
    embedding_picture(embedding, labels, "digits-basis-seed0", out, {"d_G": 0.12, "nmi": 0.9, "acc": float("nan")})
    image = np.asarray(Image.open(out).convert("RGB"))
    assert image.shape[0] >= 500 and image.shape[1] >= 600
    colours = {tuple((np.array(CLUSTER_COLOURS(c)[:3]) * 255).round().astype(int)) for c in range(10)}
    found = {tuple(p) for p in image.reshape(-1, 3)}
    assert colours <= found
