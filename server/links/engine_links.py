"""EngineLinks: a front end's engines, behind the one interface the server uses (engine/contract/interface.py).

One link per engine (server/links/engine_link.py). A request's pieces go, each as it is ready, to
the engine with the least ahead of it (its whole queue, read off its board, and this front
end's pieces not yet answered), so that a large request spreads over every device. An engine
that dies leaves the rotation and the others serve on until the supervisor has restarted it
(server/links/reattach.py brings the new process in); one that owes work and stays silent past
the stall bound (server/links/stall_watch.py) is retired (killed, and so restarted) when it is a
process, or reported stuck while it lasts when it is a thread of this process (which cannot be
killed). Only when no engine can serve is the whole server unavailable; where a restart is on
its way, the 503 says when to retry. A request is admitted (server/links/admission.py) before
anything of it is tokenized, with the whole server's queue in view.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from multiprocessing.connection import Connection

from rose_embed.engine.contract.interface import BatchFailedError, EngineUnavailableError, PieceVectors
from rose_embed.engine.contract.batch import PackedBatch
from rose_embed.engine.contract.messages import piece_figures
from rose_embed.server.links.admission import SMALL_REQUEST_TOKENS, Admission, Ticket
from rose_embed.server.links.admission_board import AdmissionBoard
from rose_embed.server.links.engine_ends import EngineEnds
from rose_embed.server.links.engine_link import EngineDiedError, EngineLink, EngineLostError, PieceFailedError
from rose_embed.server.links.reattach import Reattacher
from rose_embed.server.links.stall_watch import silent_for, stall_bound

logger = logging.getLogger("rose_embed.engines")


class EngineLinks:
    """Built from the supervisor's `EngineEnds`; `start` (off the loop) returns once every engine
    is warm, `attach` (on the loop) starts serving."""

    def __init__(self, ends: list[EngineEnds], stall_timeout: float = 120.0, in_process: bool = False,
                 max_queued_tokens: int | None = None, queue_seconds: float = 30.0,
                 admission_board: AdmissionBoard | None = None, slot: int = 0, scheduling: str = "fair",
                 stall_floor: float = 30.0, max_batch_tokens: int | None = None, restarts: Connection | None = None):
        """`max_queued_tokens` / `queue_seconds`: the queue's bound (server/links/admission.py), over what
        every front end writes on `admission_board` (None: a board of this front end alone, in
        `slot` 0). `scheduling`: the engines' (engine/contract/config.py's SCHEDULING_POLICIES).
        `stall_timeout`, `stall_floor`: the ceiling and floor of the stall bound, `max_batch_tokens` a
        full batch's tokens, which it allows for (server/links/stall_watch.py).
        `restarts`: the supervisor's restart pipe (server/links/reattach.py); None where no engine
        is ever restarted."""
        if not ends:
            raise ValueError("a front end needs at least one engine")
        self.is_fair = scheduling == "fair"
        self.links = [EngineLink(e, can_retire=not in_process, is_fair=self.is_fair) for e in ends]
        self.stall_timeout = stall_timeout
        self.admission = Admission(admission_board or AdmissionBoard.local(), slot, self.speed, max_queued_tokens,
                                   queue_seconds)
        self.dtype: str | None = None
        self.fatal_error: str | None = None  # set while no engine is left
        self._numbers = itertools.count()
        self._stuck: dict[EngineLink, str] = {}  # engines of this process stuck now, and why
        self._retired: dict[EngineLink, str] = {}  # engine processes this front end killed as stuck, and why
        self._watchdog: asyncio.Task | None = None
        self.stall_floor, self._configured_batch_tokens = stall_floor, max_batch_tokens
        self._reattacher = Reattacher(self, restarts) if restarts is not None else None
        self._loop: asyncio.AbstractEventLoop | None = None
        # By engine index, while a restart is on its way: what the supervisor said, and when to expect it.
        self._restarting: dict[int, tuple[str, float]] = {}
        self._load_seconds = 1.0  # how long the engines took to be warm at the start: a restart's estimate

    @property
    def device(self) -> str:
        return ", ".join(link.device for link in self.links)

    def start(self, ready_timeout: float = 900.0) -> None:
        """Block until every engine has loaded and warmed up (they do so side by side)."""
        started = time.monotonic()
        for link in self.links:
            try:
                link.wait_ready(ready_timeout)
            except EngineDiedError as exc:
                if self._reattacher is None:
                    raise
                link.mark_out(str(exc))  # the supervisor restarts it; it joins once warm
        self._load_seconds = max(1.0, time.monotonic() - started)
        self.dtype = next((link.dtype for link in self.links if link.dtype is not None), None)

    @property
    def max_batch_tokens(self) -> int | None:
        """The token budget the engines cut batches by, as their warm-up chose it (else the configured one;
        None where neither is known)."""
        budgets = [link.max_batch_tokens for link in self.links if link.max_batch_tokens]
        return min(budgets) if budgets else self._configured_batch_tokens

    def speed(self) -> float:
        """The serving engines' tokens per second, summed (0 while none has measured it)."""
        return sum(link.speed() for link in self.links if link.is_serving)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for link in self.links:
            if link.is_serving:
                link.attach(loop, self._on_lost)
        if self._reattacher is not None:
            self._reattacher.attach(loop)
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
            elif not link.is_serving and link.index in self._restarting:
                state.update(state="restarting", reason=self._out_reason(link))
            states.append(state)
        return states

    def _out_reason(self, link: EngineLink) -> str:
        """The supervisor's account of an engine it restarts (how the process ended) is more than this
        front end saw (its pipe closing), unless this front end killed it."""
        restart = self._restarting.get(link.index)
        if restart is None:
            return link.out_reason
        return f"{self._retired[link]}; {restart[0]}" if link in self._retired else restart[0]

    def retry_after(self) -> int | None:
        """Seconds a request that found no engine should wait before it is sent again; None where no
        engine comes back by itself (no restarts here)."""
        if self._reattacher is None:
            return None
        if any(link.is_serving and link not in self._stuck for link in self.links):
            return 1  # the others serve: a retry lands there
        now = time.monotonic()
        waits = [back_at - now for _, back_at in self._restarting.values()] or [self._load_seconds]
        return int(min(60, max(1, math.ceil(min(waits)))))

    def note_restart(self, index: int, reason: str, retry_after: int) -> None:
        """On the loop: the supervisor restarts engine `index` (`reason` says why and how)."""
        self._restarting[index] = (reason, time.monotonic() + retry_after)
        if self.fatal_error is not None:
            self.fatal_error = self._outage()

    def replace(self, link: EngineLink) -> None:
        """On the loop: a restarted engine, warm, takes its predecessor's place in the rotation."""
        old = self.links[link.index]
        self.links[link.index] = link
        self._stuck.pop(old, None)
        self._retired.pop(old, None)
        self._restarting.pop(link.index, None)
        if old.is_serving:  # its end of file is not read yet; its process is gone all the same
            old.mark_out("its process was replaced")
        old.shutdown()
        link.attach(self._loop, self._on_lost)
        self.dtype = self.dtype or link.dtype
        self.fatal_error = None
        logger.debug("engine %d on %s serves again (pid %d)", link.index, link.device, link.pid)

    def pick(self) -> EngineLink:
        """The serving engine with the least ahead of a new piece."""
        ready = [link for link in self.links if link.is_serving and link not in self._stuck]
        if not ready:
            raise EngineUnavailableError(self.problem() or "no engine serves", self.retry_after())
        return min(ready, key=lambda link: (link.load(), link.index))

    def _on_lost(self, link: EngineLink) -> None:
        """On the event loop, once per engine that goes out (dead, or retired as stuck)."""
        serving = [other for other in self.links if other.is_serving]
        if len(self.links) > 1:
            logger.error("engine %d on %s is out of rotation: %s; %d of %d engines serve on", link.index, link.device,
                         link.out_reason, len(serving), len(self.links))
        if not serving and self.fatal_error is None:
            self.fatal_error = self._outage()

    def _outage(self) -> str:
        """Why no engine serves, each engine's reason told."""
        if len(self.links) == 1:
            return self._out_reason(self.links[0])
        return "every engine is out (" + "; ".join(
            f"engine {other.index} on {other.device}: {self._out_reason(other)}" for other in self.links) + ")"

    async def _watch(self) -> None:
        """Retire (or, in this process, report) an engine that owes work and has been silent past its
        stall bound (server/links/stall_watch.py)."""
        interval = min(1.0, self.stall_timeout / 4)
        ticked = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            # A tick this late means this loop was held up: the engines' answers may be waiting unread in
            # their pipes, so their silence says nothing yet.
            was_held_up, ticked = now - ticked > interval + 1.0, now
            for link in self.links:
                if not link.is_serving or was_held_up:
                    continue
                board = link.board
                silent = silent_for(board["busy_since"], board["heartbeat"], link.heard_at, link.tokens_outstanding > 0,
                                    now)
                bound = stall_bound(board["longest_batch"], board["busy_tokens_per_second"], self.max_batch_tokens,
                                    self.stall_floor, self.stall_timeout)
                if silent > bound:
                    why = (f"the engine is stuck: no batch has finished for {silent:.1f} s with work waiting "
                           f"(the bound: {bound:.1f} s)")
                    if link.can_retire:
                        logger.error("engine %d on %s (pid %d): %s; killing it", link.index, link.device, link.pid, why)
                        self._retired[link] = why
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
        if self._reattacher is not None:
            self._reattacher.close()
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
            raise EngineUnavailableError(engines.fatal_error, engines.retry_after())
        link = engines.pick()
        figures = piece_figures(piece)  # read once: the link and the admission both need them
        opens = link not in self._touched
        if opens:
            self._touched.append(link)
        index = self._num_pieces
        self._num_pieces += 1
        try:
            vectors = await link.compute(self.number, index, opens, piece, figures, model=self.model,
                                         weight=self.weight, is_small=self.ticket.cost <= SMALL_REQUEST_TOKENS)
        except EngineLostError as exc:
            if engines.fatal_error is not None:
                raise EngineUnavailableError(engines.fatal_error, engines.retry_after()) from None
            if engines.retry_after() is not None:  # it is being restarted; the others serve meanwhile
                raise EngineUnavailableError(str(exc), 1) from None
            # The others serve on: a retry of the request succeeds.
            raise BatchFailedError(f"the engine computing the batch went out ({exc})") from exc
        except PieceFailedError as exc:
            raise BatchFailedError(f"computing the batch failed ({exc})") from exc
        if self._is_open:
            engines.admission.progress(self.ticket, figures.num_tokens)
        return vectors

    def close(self) -> None:
        if self._is_open:
            self._is_open = False
            self.engines.admission.release(self.ticket)
        for link in self._touched:
            if link.is_serving and link.has_pending(self.number):
                link.cancel(self.number)
