"""How far the engine's bf16 answers on a GPU may be from the float32 reference: at least a floor,
or three times the reference library's own bf16 error on the same device where that is larger (a
bf16 engine cannot be asked to beat the library's own bf16 run); and how far a CUDA graph's replay
may be from the eager run of the same shapes."""

from __future__ import annotations

REFERENCE_ERROR_FACTOR = 3
REPLAY_TOLERANCE = 1e-3


def bf16_tolerance(their_error: float, least: float) -> float:
    """`their_error`: the library's bf16 answer against its float32 one, on the same inputs."""
    return max(least, REFERENCE_ERROR_FACTOR * their_error)
