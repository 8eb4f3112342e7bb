"""EngineLinks: a front end's engines, behind the one interface the server uses (engine/interface.py).

One link per engine (server/engine_link.py). A request's pieces go, each as it is ready, to
the engine with the least ahead of it (its whole queue, read off its board, and this front
end's pieces not yet answered), so that a large request spreads over every device. An engine
that dies leaves the rotation and the others serve on; one whose batch runs past the stall
timeout is retired (killed) when it is a process, or reported stuck while it lasts when it
is a thread of this process (which cannot be killed). Only when no engine can serve is the
whole server unavailable. A request is admitted (server/admission.py) before anything of it
is tokenized, with the whole server's queue in view.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import time

from engine.interface import BatchFailedError, EngineUnavailableError, PieceVectors
from engine.rose.batch import PackedBatch
from server.admission import SMALL_REQUEST_TOKENS, Admission, Ticket
from server.admission_board import AdmissionBoard
from server.engine_ends import EngineEnds
from server.engine_link import EngineLink, EngineLostError, PieceFailedError

logger = logging.getLogger("rose_embed.engines")


class EngineLinks:
    """Built from the supervisor's `EngineEnds`; `start` (off the loop) returns once every engine
    is warm, `attach` (on the loop) starts serving."""

    def __init__(self, ends: list[EngineEnds], processes: list[multiprocessing.process.BaseProcess] | None = None,
                 stall_timeout: float = 120.0, in_process: bool = False, max_queued_tokens: int | None = None,
                 queue_seconds: float = 30.0, admission_board: AdmissionBoard | None = None,
                 slot: int = 0, scheduling: str = "fair"):
        """`max_queued_tokens` / `queue_seconds`: the queue's bound (server/admission.py), over what
        every front end writes on `admission_board` (None: a board of this front end alone, in
        `slot` 0). `scheduling`: the engines' (engine/config.py's SCHEDULING_POLICIES)."""
        if not ends:
            raise ValueError("a front end needs at least one engine")
        self.links = [EngineLink(e, p, can_retire=not in_process, is_fair=scheduling == "fair")
                      for e, p in zip(ends, processes or [None] * len(ends))]
        self.stall_timeout = stall_timeout
        self.admission = Admission(admission_board or AdmissionBoard.local(), slot, self.speed, max_queued_tokens,
                                   queue_seconds)
        self.dtype: str | None = None
        self.fatal_error: str | None = None  # set once no engine is left
        self._numbers = itertools.count()
        self._stuck: dict[EngineLink, str] = {}  # engines of this process stuck now, and why
        self._watchdog: asyncio.Task | None = None

    @property
    def device(self) -> str:
        return ", ".join(link.device for link in self.links)

    def start(self, ready_timeout: float = 900.0) -> None:
        """Block until every engine has loaded and warmed up (they do so side by side)."""
        for link in self.links:
            link.wait_ready(ready_timeout)
        self.dtype = self.links[0].dtype

    @property
    def max_batch_tokens(self) -> int | None:
        """The token budget the engines cut batches by, as their warm-up chose it (None: not told)."""
        budgets = [link.max_batch_tokens for link in self.links if link.max_batch_tokens]
        return min(budgets) if budgets else None

    def speed(self) -> float:
        """The serving engines' tokens per second, summed (0 while none has measured it)."""
        return sum(link.speed() for link in self.links if link.is_serving)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        for link in self.links:
            link.attach(loop, self._on_lost)
        self._watchdog = loop.create_task(self._watch(), name="rose-engine-watchdog")
        if not any(link.is_serving for link in self.links):
            self._on_lost(self.links[0])

    def open_request(self, model: int = 0, cost: float = 0.0, weight: float = 1.0) -> _Request:
        """A request for served model `model` (its place in the server's list), of about `cost`
        tokens, its share of a batch `weight` times a default request's. QueueFullError: refused."""
        ticket = self.admission.admit(cost)
        return _Request(self, next(self._numbers), model, ticket, weight)

    def problem(self) -> str | None:
        """Why no engine can serve now (all dead or stuck), or None."""
        if self.fatal_error is not None:
            return self.fatal_error
        serving = [link for link in self.links if link.is_serving]
        if serving and all(link in self._stuck for link in serving):
            return "; ".join(self._stuck[link] for link in serving)
        return None

    def describe(self) -> list[dict]:
        states = []
        for link in self.links:
            state = link.describe()
            if link in self._stuck:
                state.update(state="stuck", reason=self._stuck[link])
            states.append(state)
        return states

    def pick(self) -> EngineLink:
        """The serving engine with the least ahead of a new piece."""
        ready = [link for link in self.links if link.is_serving and link not in self._stuck]
        if not ready:
            raise EngineUnavailableError(self.problem() or self.fatal_error or "no engine serves")
        return min(ready, key=lambda link: (link.load(), link.index))

    def _on_lost(self, link: EngineLink) -> None:
        """On the event loop, once per engine that goes out (dead, or retired as stuck)."""
        serving = [other for other in self.links if other.is_serving]
        if len(self.links) > 1:
            logger.error("engine %d on %s is out of rotation: %s; %d of %d engines serve on", link.index, link.device,
                         link.out_reason, len(serving), len(self.links))
        if not serving and self.fatal_error is None:
            self.fatal_error = link.out_reason if len(self.links) == 1 else "every engine is out (" + "; ".join(
                f"engine {other.index} on {other.device}: {other.out_reason}" for other in self.links) + ")"

    async def _watch(self) -> None:
        """Retire (or, in this process, report) an engine whose batch runs past the stall timeout."""
        interval = min(1.0, self.stall_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for link in self.links:
                if not link.is_serving:
                    continue
                busy_since = link.board["busy_since"]
                if busy_since and now - busy_since > self.stall_timeout:
                    why = f"the engine is stuck: a batch has been running for {now - busy_since:.1f} s"
                    if link.can_retire:
                        logger.error("engine %d on %s: %s; retiring it", link.index, link.device, why)
                        link.retire(why)
                        continue
                    if link not in self._stuck:
                        logger.error("%s; failing the requests that wait on it", why)
                    self._stuck[link] = why
                    # Every tick, as a piece may have slipped in between the check and the stall.
                    link.fail_pending(EngineUnavailableError(why))
                elif link in self._stuck:
                    logger.warning("engine %d on %s serves again", link.index, link.device)
                    del self._stuck[link]

    def stop_serving(self) -> None:
        """On the event loop: every link leaves the rotation and tells its engine this front end is done."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        for link in self.links:
            link.stop_serving()

    def shutdown(self) -> None:
        for link in self.links:
            link.shutdown()


class _Request:
    """One admitted request's pieces: each to the engine with the least ahead; `close` drops what has not run."""

    def __init__(self, engines: EngineLinks, number: int, model: int, ticket: Ticket, weight: float):
        self.engines, self.number, self.model = engines, number, model
        self.ticket, self.weight = ticket, weight
        self._touched: list[EngineLink] = []
        self._num_pieces = 0
        self._is_open = True

    def settle(self, num_tokens: int) -> None:
        """Every part is tokenized: the request's real size replaces its estimate in the queue's count."""
        self.engines.admission.settle(self.ticket, num_tokens)

    async def compute(self, piece: PackedBatch) -> PieceVectors:
        engines = self.engines
        if engines.fatal_error is not None:
            raise EngineUnavailableError(engines.fatal_error)
        link = engines.pick()
        opens = link not in self._touched
        if opens:
            self._touched.append(link)
        index = self._num_pieces
        self._num_pieces += 1
        try:
            vectors = await link.compute(self.number, index, opens, piece, model=self.model, weight=self.weight,
                                         is_small=self.ticket.cost <= SMALL_REQUEST_TOKENS)
        except EngineLostError as exc:
            if engines.fatal_error is not None:
                raise EngineUnavailableError(engines.fatal_error) from None
            # The others serve on: a retry of the request succeeds.
            raise BatchFailedError(f"the engine computing the batch went out ({exc})") from exc
        except PieceFailedError as exc:
            raise BatchFailedError(f"computing the batch failed ({exc})") from exc
        if self._is_open:
            engines.admission.progress(self.ticket, piece.num_tokens)
        return vectors

    def close(self) -> None:
        if self._is_open:
            self._is_open = False
            self.engines.admission.release(self.ticket)
        for link in self._touched:
            if link.is_serving and link.has_pending(self.number):
                link.cancel(self.number)
