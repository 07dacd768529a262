"""The scale study's figure 11, its table and its claims (:mod:`basis.studies.scale`), from
a finished study's folder: numpy and matplotlib only.

A point past the time limit measured the machine, not the method: it is shown as "did not
finish" in the table and its claim is "not measured here", never "not reproduced"."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from basis.studies import ClaimRow, figures
from basis.studies.figures import load_study, save_figure

#: What each point records, per method and n (NaN where the method did not run).
MEASURES = ("fit_s", "transform_s", "points_per_s", "peak_gb", "device_peak_mb", "d_G", "d_perp", "nmi", "acc")
#: The floors of the study for BASiS (#58): fit time flat in n at a fixed budget, and d_G at
#: the largest n within 1.25x of d_G at the smallest.
FIT_SLOPE_FLOOR, D_G_RATIO_FLOOR = 0.1, 1.25
#: ``<method>/status`` per n: measured within the limit, measured past it, not started (past
#: the limit at a smaller n), stopped at the limit.
WITHIN, PAST_LIMIT, NOT_STARTED, STOPPED = 0, 1, 2, 3


def _state(result: dict[str, float], arrays: dict[str, np.ndarray], method: str, i: int) -> str:
    code, limit = int(arrays[f"{method}/status"][i]), f"{result['time_limit_s']:g} s"
    return {
        STOPPED: f"did not finish in {limit} (stopped at the limit)",
        NOT_STARTED: f"did not finish in {limit} (not started: past the limit at a smaller n)",
        PAST_LIMIT: f"past the limit of {limit}",
    }.get(code, _target_state(result, arrays, method, i))


def _target_state(result: dict[str, float], arrays: dict[str, np.ndarray], method: str, i: int) -> str:
    """``basis_target``'s budget at the ``i``-th n, or that no budget reached the target."""
    if method != "basis_target":
        return ""
    target, needed = result["basis_target/d_G_target"], arrays["basis_target/n_iter"][i]
    if np.isnan(needed):
        return f"d_G target {target:.3g} not reached by the largest budget"
    return f"{needed:,.0f} iterations to d_G <= {target:.3g}"


def _cell(value: float) -> str:
    return f"{value:.3g}" if np.isfinite(value) else "—"


def draw_scale(folders: list[str | Path], out: str | Path) -> str:
    """Log-log fit seconds and peak host memory against n with each curve's slope, and d_G
    against n; returns the numbers as a markdown table, a row per method and n."""
    result, arrays = load_study(folders[0])
    ns, curves = arrays["n_points"], [str(c) for c in arrays["curves"]]
    fig, axes = figures.plt.subplots(1, 4, figsize=(17, 3.6))
    for method in curves:
        axes[0].loglog(ns, arrays[f"{method}/fit_s"], "o-", label=_slope_text(result, method))
        axes[1].loglog(ns, arrays[f"{method}/peak_gb"], "o-", label=method)
        if method != "exact":
            axes[2].semilogx(ns, arrays[f"{method}/d_G"], "o-", label=method)
    if "basis_target" in curves:
        target = result["basis_target/d_G_target"]
        to = f"d_G <= {target:.3g}" if np.isfinite(target) else "its d_G target (not measured: BASiS past the limit)"
        axes[3].semilogx(ns, arrays["basis_target/n_iter"], "o-", label=f"BASiS to {to}")
        axes[3].legend(fontsize=6)
    labels = ("fit seconds", "peak host memory (GB)", "d_G against the exact embedding", "iterations to the d_G target")
    for ax, label in zip(axes, labels):
        ax.set_xlabel("n (training points)")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=6)
    axes[2].legend(fontsize=6)
    save_figure(fig, out)
    lines = [
        "| method | n | fit s | held-out s | points/s | peak GB | device peak MB | d_G | d_perp | NMI | ACC | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method in curves:
        for i, n in enumerate(ns):
            cells = [_cell(arrays[f"{method}/{m}"][i]) for m in MEASURES]
            lines.append(f"| {method} | {int(n):,} | {' | '.join(cells)} | {_state(result, arrays, method, i)} |")
    slopes = "; ".join(_slope_text(result, method) for method in curves)
    return "\n".join(lines) + f"\n\nLog-log slopes of fit seconds against n: {slopes}.\n"


def scale_claims(results: dict[str, dict[str, float]]) -> list[ClaimRow]:
    """Beyond the paper: BASiS's fit time is flat in n at a fixed budget and its d_G holds
    as n grows; every method's slope and the largest n it finished within the limit (no
    rows for a run without BASiS)."""
    result = results[""]
    if "basis/fit_slope" not in result:
        return []
    methods = sorted(key.split("/")[0] for key in result if key.endswith("/fit_slope"))
    slopes = "; ".join(_slope_text(result, method) for method in methods)
    # BASiS past the time limit at some n measured this machine, not the method: no verdict
    past = _past_limit(result, "basis")
    ratio = (
        f"{result['basis/d_G_ratio']:.2f}x at n = {result['n_max']:,.0f}; its embedding"
        f" {result['basis/transform_over_forward']:.2f}x a bare forward pass{_budget_note(result)}"
    )
    return [
        {
            "claim": "Beyond the paper (scale): BASiS's fit time at a fixed budget does not grow with n",
            "criterion": f"log-log slope of fit seconds against n ≤ {FIT_SLOPE_FLOOR}",
            "measured": f"slopes (largest n within {result['time_limit_s']:g} s): {slopes}",
            "reproduced": past or bool(result["basis/fit_slope"] <= FIT_SLOPE_FLOOR),
        },
        {
            "claim": "Beyond the paper (scale): BASiS's accuracy at a fixed budget holds as n grows",
            "criterion": f"d_G at the largest n ≤ {D_G_RATIO_FLOOR}x d_G at the smallest",
            "measured": past or ratio,
            "reproduced": past or bool(result["basis/d_G_ratio"] <= D_G_RATIO_FLOOR),
        },
    ]


def _past_limit(result: dict[str, float], method: str) -> str:
    """Where ``method`` ran past the time limit before the largest n, in words ("" if it did not)."""
    largest = result[f"{method}/largest_n"]
    if largest == result["n_max"]:
        return ""
    where = "at every n" if np.isnan(largest) else f"beyond n = {largest:,.0f}"
    return f"{method} ran past {result['time_limit_s']:g} s on this machine {where}"


def _slope_text(result: dict[str, float], method: str) -> str:
    largest, slope = result[f"{method}/largest_n"], result[f"{method}/fit_slope"]
    if np.isnan(largest):
        return f"{method} not measured (past {result['time_limit_s']:g} s at every n)"
    if np.isnan(slope):
        return f"{method} one point only (to n = {largest:,.0f})"
    return f"{method} {slope:.2f} (to n = {largest:,.0f})"


def _budget_note(result: dict[str, float]) -> str:
    """What budget holds BASiS at its d_G target, where the run has the ``basis_target`` curve."""
    if "basis_target/d_G_target" not in result:
        return ""
    needed = result["basis_target/largest_n_iter"]
    budget = (
        "at some n no budget tried reached it" if np.isnan(needed) else f"at most {needed:,.0f} iterations reach it"
    )
    return f"; to d_G <= {result['basis_target/d_G_target']:.3g} at every n {budget}"
