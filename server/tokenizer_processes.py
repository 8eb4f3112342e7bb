"""A front end's tokenizer processes, for the parts of large requests.

The default models' WordPiece runs the ASCII fast path (engine/text/ascii_wordpiece.py),
which encodes in Python and holds the GIL: a front end's threads tokenize one at a time, and
a request of a thousand texts spends most of its time there while the device idles. Copies
of the tokenizer in processes of their own (engine/rose/tokenizer_processes.py's pool, one
per front end) tokenize a large request's parts side by side, while the front end's event
loop hands the finished parts to the engines and encodes the vectors that come back. Small
requests never use them: a trip to a process costs more than tokenizing a few texts in place.
Each process watches the front end and ends with it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from engine.rose.tokenizer_processes import start_pool, tokenize_in_worker
from engine.text.tokenizer import TextTokenizer

logger = logging.getLogger("rose_embed.server")


class TokenizerProcesses:
    def __init__(self, tokenizer: TextTokenizer, num_processes: int):
        self.num_processes = num_processes
        self._pool = start_pool(tokenizer.recipe, num_processes, os.getpid())

    @property
    def is_usable(self) -> bool:
        return self._pool is not None

    def warm_up(self) -> None:
        """Start every process and load its tokenizer now (blocking), not on a request's time."""
        futures = [self._pool.submit(tokenize_in_worker, ["warm up"], 0, "", "truncate")
                   for _ in range(2 * self.num_processes)]
        for future in futures:
            future.result()

    async def encode(self, texts: list[str]) -> list[np.ndarray] | None:
        """Token ids per text, as TextTokenizer.encode gives them; None if the processes are gone
        (a worker died: the caller tokenizes in place from then on)."""
        if self._pool is None:
            return None
        try:
            piece = await asyncio.wrap_future(self._pool.submit(tokenize_in_worker, texts, 0, "", "truncate"))
        except BrokenProcessPool:
            logger.error("a tokenizer process died; this front end tokenizes in its own process from now on")
            self.shutdown()
            return None
        return np.split(piece.batch.input_ids, piece.batch.cu_seqlens[1:-1])

    def shutdown(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
