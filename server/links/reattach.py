"""How a front end learns that an engine process was restarted, and takes up the new one.

The supervisor (server/processes/engine_keeper.py) restarts an engine process that died; every front end
then needs new ends to it: the dead engine's arena and pipes are gone with it. So each front end
has a restart pipe from the supervisor, read on its event loop. Two messages come down it: an
`EngineDown` as soon as the supervisor sees the engine go (why, and when to retry: /health and
the 503s say so), then an `EngineUp` with the ends to the new process, whose pipes travel as
multiprocessing passes connections between processes (as engine/contract/messages.py's Attach does).
The new link takes the dead one's place once the engine says it is warm; until then the old
one stays out of rotation.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Protocol

from rose_embed.server.links.engine_ends import EngineEnds
from rose_embed.server.links.engine_link import EngineLink, EngineLoadError

logger = logging.getLogger("rose_embed.engines")


@dataclass(frozen=True)
class EngineDown:
    """Supervisor -> front end: engine `index` died and is being restarted."""

    index: int
    reason: str  # why it went and what happens now, as /health says it
    retry_after: int  # seconds until the restarted engine should serve, as Retry-After says it


@dataclass
class EngineUp:
    """Supervisor -> front end: the ends to engine `ends.index`'s new process (it may still be loading)."""

    ends: EngineEnds


class Rotation(Protocol):
    """What of a front end's engines (server/links/engine_links.py) a restart changes."""

    links: list[EngineLink]  # by engine index

    def note_restart(self, index: int, reason: str, retry_after: int) -> None:
        """Engine `index` died and is being restarted; `reason` says why and how."""

    def replace(self, link: EngineLink) -> None:
        """`link`, to a restarted engine now warm, takes its predecessor's place."""


class Reattacher:
    """A front end's reader of its restart pipe: brings each restarted engine into `links`."""

    def __init__(self, links: Rotation, restarts: Connection):
        self.links, self.restarts = links, restarts
        self._loop: asyncio.AbstractEventLoop | None = None
        # By engine index: the new link waiting for its engine to be warm, and the reply pipe it waits on.
        self._coming: dict[int, tuple[EngineLink, int]] = {}

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self.restarts.fileno(), self._read)

    def _read(self) -> None:
        try:
            while self.restarts.poll():
                message = self.restarts.recv()
                if isinstance(message, EngineDown):
                    self.links.note_restart(message.index, message.reason, message.retry_after)
                else:
                    self._take_up(message.ends)
        except (EOFError, OSError):  # the supervisor is gone; this front end stops with it (parent_watch)
            self._loop.remove_reader(self.restarts.fileno())

    def _take_up(self, ends: EngineEnds) -> None:
        """Wait (on the loop, no thread: a stop must not wait for an engine's load) for the engine's
        first reply: Ready brings the link into rotation; end of file (it died again while loading)
        or a load failure drop it, and the supervisor decides what follows."""
        # Like its predecessor: a process is killed when it is stuck, a thread of this process cannot be.
        link = EngineLink(ends, can_retire=self.links.links[ends.index].can_retire, is_fair=self.links.is_fair)
        fd = ends.replies.fileno()
        self._drop(ends.index)
        self._coming[ends.index] = (link, fd)

        def on_first_reply() -> None:
            self._loop.remove_reader(fd)
            if self._coming.get(ends.index, (None,))[0] is not link:
                return
            del self._coming[ends.index]
            try:
                link.wait_ready(0.0)  # the reply is there: this reads it without waiting
            except EngineLoadError as exc:
                logger.warning("%s", exc)
                link.shutdown()
                return
            self.links.replace(link)

        self._loop.add_reader(fd, on_first_reply)

    def _drop(self, index: int) -> None:
        coming = self._coming.pop(index, None)
        if coming is not None:
            link, fd = coming
            self._loop.remove_reader(fd)
            link.shutdown()

    def close(self) -> None:
        """On the loop, as the front end stops: no more restarts taken up."""
        for index in list(self._coming):
            self._drop(index)
        if self._loop is not None and not self.restarts.closed:
            self._loop.remove_reader(self.restarts.fileno())
        self.restarts.close()
