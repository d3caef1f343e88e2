"""What a run's seeds say about the method: each seed's record of its fit report
(:func:`method_record`), the recipes over the seeds (:func:`recipes_report`) and how well the
judge chose (:func:`selection_report`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..analysis.statistics import rank_correlation
from ..io.run_evaluation import bootstrap_mean_ci
from ..select.fit_report import FitReport, format_return

__all__ = ["format_return", "log_recipes_report", "method_record", "recipes_report",
           "selection_report"]

logger = logging.getLogger("nopg.experiments")


def method_record(report: FitReport) -> dict[str, Any]:
    """The seed summary's record of the method: the fit report, and in the form of earlier
    results the kept recipe with one row per recipe fitted (the kept one first) and the
    escalation, or the snapshot choice and the restarts."""
    out: dict[str, Any] = {"fit_report": report.to_dict(), "restarts": []}
    if len(report.recipes) > 1:
        out["recipe"] = report.kept.name
        out["recipes"] = [{"recipe": c.name, "kept": c.kept, "return_mean": c.return_mean,
                           "J_hat": c.J_hat, "support_gap": c.support_gap,
                           "fit_time_s": c.fit_time_s,
                           "judge": None if c.score is None else c.score.to_dict(),
                           **({} if c.snapshot is None else {"snapshot": c.snapshot.to_dict()})}
                          for c in report.candidates]
        if report.escalation is not None:
            out["escalation"] = report.escalation
        return out
    if report.kept.snapshot is not None:
        out["snapshot"] = report.kept.snapshot.to_dict()
    if len(report.candidates) > 1:
        out["restarts"] = [{"restart": int(c.name[len("restart"):]), "J_hat": c.J_hat,
                            "support_gap": c.support_gap, "return_mean": c.return_mean}
                           for c in sorted(report.candidates, key=lambda c: c.name)]
    return out


def recipes_report(seeds: Sequence[Mapping[str, Any]], confidence: float = 0.95
                   ) -> dict[str, Any] | None:
    """What a run's recipes gave over its seeds (the ``seeds`` results of the runner).

    Returns ``None`` where no seed fitted several recipes, else ``per_recipe`` (each recipe's
    mean evaluation return over the seeds, its bootstrap interval at ``confidence``, and how
    many seeds kept it), and, over every fit with an evaluation return, the rank correlation
    (Spearman) of the judge's forecast and of each fit's own ``J_hat`` with that return: whether
    the judge ranks the fits, and whether ``J_hat`` would have.
    """
    rows = [row for seed in seeds for row in seed.get("recipes", ())]
    if not rows:
        return None
    per_recipe: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(row["recipe"] for row in rows):
        mine = [row for row in rows if row["recipe"] == name]
        returns = [row["return_mean"] for row in mine if row["return_mean"] is not None]
        per_recipe[name] = {
            "seeds": len(mine), "kept": sum(bool(row["kept"]) for row in mine),
            "return_mean": float(np.mean(returns)) if returns else None,
            "return_ci": list(bootstrap_mean_ci(returns, confidence)) if returns else None}
    rated = [row for row in rows if row["return_mean"] is not None]
    truth = [row["return_mean"] for row in rated]
    return {"per_recipe": per_recipe, "confidence": confidence, "fits": len(rated),
            "spearman_judge": rank_correlation(
                [row["judge"]["episode_return_mean"] for row in rated], truth),
            "spearman_own_J_hat": rank_correlation([row["J_hat"] for row in rated], truth)}


def selection_report(seeds: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """How well the judge chose, over a run's seeds: the Spearman correlation of its forecast
    with the true return over every scored policy of every seed (``fit_report.scored``), and
    the regret@1 of each seed's choice (the best scored return less the kept one's), its mean
    and largest. ``None`` where no seed scored a policy with a known return."""
    rows = [row for seed in seeds for row in seed.get("fit_report", {}).get("scored", ())]
    regrets = [seed["fit_report"]["regret_at_1"] for seed in seeds
               if seed.get("fit_report", {}).get("regret_at_1") is not None]
    if not rows:
        return None
    return {"scored": len(rows),
            "spearman": rank_correlation([r["forecast"] for r in rows],
                                         [r["return"] for r in rows]),
            "regret_at_1": regrets, "regret_at_1_mean": float(np.mean(regrets)),
            "regret_at_1_max": float(np.max(regrets))}


def log_recipes_report(report: Mapping[str, Any]) -> None:
    """One line per recipe and one for the rank correlations (:func:`recipes_report`)."""
    def fmt(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    for name, row in report["per_recipe"].items():
        ci = row["return_ci"]
        logger.info("recipe %s: return %s%s over %d seed(s), kept on %d", name,
                    format_return(row["return_mean"]),
                    "" if ci is None else f" [{ci[0]:.1f}, {ci[1]:.1f}]", row["seeds"],
                    row["kept"])
    logger.info("rank correlation with the evaluation return over %d fits: the judge %s, each "
                "fit's own J_hat %s", report["fits"], fmt(report["spearman_judge"]),
                fmt(report["spearman_own_J_hat"]))
