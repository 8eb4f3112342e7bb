"""How one batch's token budget is shared among the requests that have inputs waiting.

Weighted max-min fairness ("water-filling"): requests are served in order of what they ask
for per unit of weight; each gets what it asks for if that is within its weighted share of
what is left, else its share. So a request that asks for less than an equal share (a
one-text query) gets all of it, whatever the others ask for, and the budget the small ones
leave is split among the large ones by weight. Nothing is left unassigned while anyone asks
for more.
"""

from __future__ import annotations

from collections.abc import Sequence


def water_fill(demands: Sequence[float], weights: Sequence[float], budget: float) -> list[float]:
    """Each demand's share of `budget` (same order). Weights are positive; a share never passes its demand."""
    shares = [0.0] * len(demands)
    left, weight_left = float(budget), float(sum(weights))
    for i in sorted(range(len(demands)), key=lambda i: demands[i] / weights[i]):
        fair = left * weights[i] / weight_left if weight_left > 0 else 0.0
        shares[i] = min(float(demands[i]), fair)
        left -= shares[i]
        weight_left -= weights[i]
    return shares
