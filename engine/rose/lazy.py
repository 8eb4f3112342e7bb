"""LazyResult: a batch's vectors that may still be on their way back from the device."""

from __future__ import annotations

import numpy as np
import torch


class LazyResult:
    """A host buffer, the asynchronous copy into it and an event that marks its end.

    On CPU the vectors are ready at construction. On CUDA the device-to-host copy is
    queued on the current stream into pinned memory and an event recorded after it, so
    the engine thread can launch the next batch at once; `wait` blocks only the caller.
    """

    def __init__(self, vectors: torch.Tensor, num_rows: int):
        # vectors [>= num_rows, dim] float32: one row per pooling segment; rows past num_rows are padding.
        self._num_rows = num_rows
        if vectors.device.type == "cuda":
            self._host = torch.empty(vectors.shape, dtype=vectors.dtype, pin_memory=True)
            self._host.copy_(vectors, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = vectors
            self._event = None

    def ready(self) -> bool:
        return self._event is None or self._event.query()

    def wait(self) -> np.ndarray:
        """Block until the vectors are on the host; return them as [num_rows, dim] float32."""
        if self._event is not None:
            self._event.synchronize()
        return self._host[: self._num_rows].numpy()
