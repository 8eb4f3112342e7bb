"""SmoothQuant's calibration: the largest magnitude of each input channel of the linear layers it
smooths, read while the unquantized model embeds a fixed set of texts at load.

The texts are built in (below), so a model's factors are the same on every start and machine:
the outlier channels SmoothQuant evens out come from the model's weights (a norm's gain and
bias), not from what is being embedded, so a few dozen varied texts find them. On the default
model the factors from these texts keep the quality of factors from 300 other texts
(bench/results/cpu/README.md, "Built").
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from rose_embed.engine.rose.quantization.module_swap import replace_submodule

# Prose, questions, lists, code, numbers, markup and a few other scripts, short and long.
CALIBRATION_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of Australia, and why was it built from scratch?",
    "Photosynthesis converts light energy into chemical energy stored in glucose, releasing oxygen as a by-product.",
    "def mean(values):\n    \"\"\"Return the arithmetic mean of a non-empty list.\"\"\"\n    return sum(values) / len(values)",
    "SELECT name, COUNT(*) FROM orders WHERE created_at > '2020-01-01' GROUP BY name ORDER BY 2 DESC;",
    "The meeting was moved to Thursday at 3 pm; please bring the quarterly figures and the draft budget.",
    "In 1969, Apollo 11 landed on the Moon, and Neil Armstrong became the first person to walk on its surface.",
    "How do I reset my password if I no longer have access to the email address on my account?",
    "Ingredients: 200 g flour, 2 eggs, 300 ml milk, a pinch of salt. Whisk until smooth and rest for 30 minutes.",
    "The court held that the contract was void because one party had not been informed of a material fact.",
    "Returns a new array with the elements sorted in ascending order; the original array is left unchanged.",
    "Error: connection refused (errno 111) while connecting to 10.0.0.12:5432 after 3 retries.",
    "Mitochondria are the organelles in which cellular respiration produces most of the cell's ATP.",
    "Le chat dort sur le canapé pendant que la pluie tombe doucement sur les toits de la ville.",
    "Der Zug nach Berlin hat heute zwanzig Minuten Verspätung wegen Bauarbeiten auf der Strecke.",
    "El museo abre de martes a domingo, y la entrada es gratuita el primer domingo de cada mes.",
    "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。",
    "Customer review: the headphones are comfortable and the battery lasts all week, but the case feels cheap.",
    "<div class=\"card\"><h2>Pricing</h2><p>Starts at $9 per month, billed annually.</p></div>",
    "Theorem. Every bounded monotone sequence of real numbers converges to a limit.",
    "To install the package, run pip install --upgrade example-package and restart your interpreter.",
    "The patient reported mild headaches and fatigue for two weeks; blood pressure was 128/84 mmHg.",
    "Interest rates rose by a quarter of a percentage point, the third increase this year.",
    "A transformer encoder maps a sequence of tokens to contextual vectors with self-attention and feed-forward "
    "layers, and a pooling step turns those vectors into one embedding for the whole text, which search systems "
    "compare by cosine similarity to find the passages closest in meaning to a query.",
    "ok",
    "Yes.",
    "2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47",
    "Q: Can I bring a pet on the train? A: Small pets in a carrier travel free; larger dogs need a ticket.",
    "The river flooded the lower town twice in the nineteenth century, and the levee was raised after each flood.",
    "git rebase --interactive HEAD~3 lets you squash, reorder or edit the last three commits.",
    "Warning: this product contains small parts and is not suitable for children under three years of age.",
    "She opened the letter slowly, already knowing from the handwriting who had sent it after all these years.",
)


class _Recording(nn.Module):
    """A linear layer that records the largest |input| per channel as it runs. It is not an
    nn.Linear, so a model that would fold the layer into a fused step (BERT's up projection and
    GELU on a GPU) calls it as a module."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.linear = linear
        self.maximum: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seen = x.detach().reshape(-1, x.shape[-1]).abs().amax(0).float()
        self.maximum = seen if self.maximum is None else torch.maximum(self.maximum, seen)
        return self.linear(x)


def activation_maxima(model: nn.Module, names: list[str], embed: Callable[[list[str]], object]) -> dict[str, torch.Tensor]:
    """{name: the largest |input| of each input channel [K] float32} of the linear layers `names`
    (as model.named_modules gives them), while `embed` runs the model on CALIBRATION_TEXTS."""
    recorders = {name: _Recording(model.get_submodule(name)) for name in names}
    for name, recorder in recorders.items():
        replace_submodule(model, name, recorder)
    try:
        embed(list(CALIBRATION_TEXTS))
    finally:
        for name, recorder in recorders.items():
            replace_submodule(model, name, recorder.linear)
    return {name: recorder.maximum for name, recorder in recorders.items() if recorder.maximum is not None}
