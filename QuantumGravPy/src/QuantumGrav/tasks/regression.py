"""One number per causal set: ``y`` is a value, the model returns one output per set; mean squared error."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from .base import Task


class RegressionTask(Task):
    """Outputs ``[graphs, 1]``; target ``[graphs, 1]`` (float); mean squared error; MAE, RMSE and R^2. Totals: loss
    sum, count, sum |error|, sum error^2, sum y, sum y^2 (R^2 = 1 - SS_res / SS_tot with SS_tot = sum y^2 - (sum y)^2
    / n)."""

    summary = "one number per graph: y a value, one output, mse_loss"
    reports = {"loss": "min", "mae": "min", "rmse": "min", "r2": "max"}
    default_loss = staticmethod(F.mse_loss)
    num_totals = 6

    def __init__(self):
        super().__init__(1)

    def target(self, y):
        return y.view(-1, 1).float()

    def target_problem(self, y):
        problem = self._one_value(y)
        if problem is None and not bool(torch.isfinite(y.double()).all()):
            return f"a {self.type} task needs a finite number in y, got {y.tolist()}"
        return problem

    def batch_totals(self, outputs, target, loss):
        predicted, true = outputs.double().view(-1), target.double().view(-1)
        error = predicted - true
        count = torch.tensor(float(true.numel()), device=outputs.device, dtype=torch.float64)
        return torch.stack([loss.detach().double() * count, count, error.abs().sum(), (error**2).sum(),
                            true.sum(), (true**2).sum()])

    def metrics(self, totals):
        loss_sum, count, abs_sum, sq_sum, y_sum, y_sq_sum = totals.tolist()
        n = max(count, 1.0)
        total_variation = y_sq_sum - y_sum**2 / n
        return {"loss": loss_sum / n, "mae": abs_sum / n, "rmse": math.sqrt(sq_sum / n),
                "r2": 1.0 - sq_sum / total_variation if total_variation > 0 else math.nan, "count": int(count)}

    def undefined(self, metrics: dict[str, Any]) -> dict[str, str]:
        r2 = metrics.get("r2")
        return {"r2": "the true values do not vary (R^2 divides by their variance)"} \
            if r2 is not None and math.isnan(r2) else {}

    def scored_rows(self, outputs, targets):
        """The predicted value."""
        return [{**({"truth": truth} if not math.isnan(truth) else {}), "score": value}
                for truth, value in zip(targets.view(-1).tolist(), outputs.view(-1).tolist())]


def train_mean_metrics(train_y: Sequence[float], test_y: Sequence[float]) -> dict[str, float]:
    """The trivial regressor (always the training mean) on the test split: what a model must beat."""
    mean = sum(train_y) / len(train_y)
    task = RegressionTask()
    true = torch.tensor(test_y, dtype=torch.float64).view(-1, 1)
    outputs = torch.full_like(true, mean)
    totals = task.batch_totals(outputs, true, F.mse_loss(outputs, true))
    return {f"train_mean_{k}": v for k, v in task.metrics(totals).items() if k in ("mae", "rmse", "r2")}
