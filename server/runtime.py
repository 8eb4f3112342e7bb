"""The server's long-lived parts (engines, batcher, tokenizer workers) and their lifecycle.

In the server the engines are processes the supervisor started (server/supervisor.py), and
the runtime is handed their links (server/engine_links.py). An in-process engine object (an
`Engine`, or a test's fake) may be passed instead, or loaded here when none is: what tests and
programs that embed the app use; the batcher then drives it from one thread of this process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from server.batcher import Batcher
from server.engine_link import EngineLoadError
from engine.model_files.loader import ModelLoadError
from server.watchdog import Watchdog
from server.config import ServerConfig
from server.plugins import load_engine_plugin
from server.trace import note_batch

logger = logging.getLogger("rose_embed.server")
# Up to this many characters a request is tokenized on the event loop (well under a millisecond
# on the fast path); longer ones go to a thread so that other requests are not held up.
_INLINE_TOKENIZE_CHARS = 16_384


class Runtime:
    """Created with the app; `start` (in the lifespan) loads, warms up and starts batching."""

    def __init__(self, config: ServerConfig, engine=None):
        self.config = config
        self.engine = engine
        self.batcher: Batcher | None = None
        self.watchdog: Watchdog | None = None
        self.batch_listeners = [note_batch]  # called with each computed batch's record
        self.is_ready = False
        self._load_task: asyncio.Task | None = None
        self._tokenizer_pool = ThreadPoolExecutor(config.tokenizer_workers, thread_name_prefix="rose-tokenize")

    @property
    def served_model_name(self) -> str:
        return self.config.served_model_name or self.engine.spec.name

    def start(self) -> None:
        """Load in the background so that the port opens at once and /health says 503 meanwhile."""
        self._load_task = asyncio.get_running_loop().create_task(self._load())

    async def loaded(self) -> None:
        """Returns once the background load has ended (ready, or failed and shutting down)."""
        await asyncio.shield(self._load_task)

    async def _load(self) -> None:
        try:
            await self._load_and_warm_up()
        except Exception as exc:
            if isinstance(exc, (EngineLoadError, ModelLoadError)):  # it says why; a traceback would add nothing
                logger.error("%s; shutting down", exc)
            else:
                logger.exception("the model failed to load; shutting down")
            # A server that can never become ready must not linger as a healthy-looking process.
            os.kill(os.getpid(), signal.SIGTERM)

    async def _load_and_warm_up(self) -> None:
        if self.engine is None:
            logger.info("loading model %s", self.config.engine.model or "(default)")
            from engine.rose.engine import Engine  # here, not at the top: a front end of engine processes needs no torch

            self.engine = await asyncio.to_thread(Engine, self.config.engine)
        if self.has_engine_processes:
            await asyncio.to_thread(self.engine.start)  # each engine process applies the plugin itself
        else:
            await asyncio.to_thread(self.engine.warm_up)
            if self.config.engine_plugin:  # after warm-up, so that injected faults hit requests only
                load_engine_plugin(self.config.engine_plugin)(self.engine)
        self.batcher = Batcher(
            self.engine,
            max_batch_tokens=self.config.engine.max_batch_tokens,
            max_batch_seqs=self.config.engine.max_batch_seqs,
            max_queued_tokens=self.config.max_queued_tokens,
            max_batches_in_flight=self.config.batches_in_flight,
        )
        self.batcher.listeners.extend(self.batch_listeners)
        self.batcher.start()
        self.watchdog = Watchdog(self.batcher, self.config.engine_stall_timeout)
        self.watchdog.start()
        self.is_ready = True
        logger.info("model %s ready on %s (%s)", self.served_model_name, self.engine.device, self.engine.dtype)

    async def stop(self) -> None:
        self.is_ready = False
        if not self._load_task.done():
            self._load_task.cancel()
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.batcher is not None:
            # In-flight requests have finished (or been cut off) by now; a stuck batch is not waited for.
            await self.batcher.stop(timeout=min(5.0, self.config.shutdown_timeout))
        if self.has_engine_processes:
            self.engine.stop_serving()  # on this loop, where the engines' pipes are read
            await asyncio.to_thread(self.engine.shutdown)
        self._tokenizer_pool.shutdown(wait=False, cancel_futures=True)

    def engine_problem(self) -> str | None:
        """Why the engine cannot serve (dead or stuck), or None."""
        return self.watchdog.problem() if self.watchdog is not None else None

    @property
    def has_engine_processes(self) -> bool:
        return hasattr(self.engine, "replicas")

    def engine_states(self) -> list[dict] | None:
        """Each engine process as /health lists it (None: an in-process engine)."""
        if not self.has_engine_processes or self.batcher is None:
            return None
        return [replica.describe() for replica in self.batcher.replicas]

    async def tokenize(self, texts: list[str]) -> list[np.ndarray]:
        """Tokenize off the event loop where that runs in parallel with it (the Rust tokenizer
        releases the GIL) or would hold it up; a small request in Python is cheaper in place."""
        if self.engine.tokenizer.holds_the_gil and sum(map(len, texts)) <= _INLINE_TOKENIZE_CHARS:
            return self.engine.tokenize(texts)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._tokenizer_pool, self.engine.tokenize, texts)
