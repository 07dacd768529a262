"""Mean +/- std over seeds of every data set x method x measure."""
import json
from pathlib import Path

import pandas as pd

smk = snakemake  # noqa: F821
rows = []
for path in map(Path, smk.input):
    method, dataset = path.parts[-3], path.parts[-4]
    rows.append({"dataset": dataset, "method": method, **json.loads(path.read_text())})
frame = pd.DataFrame(rows)
measures = ["d_G", "d_perp", "nmi", "acc", "accuracy"]
summary = frame.groupby(["dataset", "method"])[measures].agg(["mean", "std"])
summary.to_csv(smk.output.csv)
lines = ["| dataset | method | " + " | ".join(measures) + " |", "|---|---|" + "---|" * len(measures)]
for (dataset, method), row in summary.iterrows():
    cells = [f"{row[(m, 'mean')]:.3f} ± {row[(m, 'std')]:.3f}" for m in measures]
    lines.append(f"| {dataset} | {method} | " + " | ".join(cells) + " |")
Path(smk.output.markdown).write_text("\n".join(lines) + "\n")
