"""A front end's side of the part processes (server/processes/part_processes.py): hand a large request's
parts to them, get the token ids or the encoded vectors back.

Each process is a connection read and written by the event loop itself: no thread of the
front end stands between a part and its answer (a thread would first have to win the GIL
from the event loop, which holds it while it encodes answers). Writes never block: a process
answering another front end cannot hold this one up. This front end gives each process one
part at a time; parts waiting meanwhile go, in order, to the first process that is free.
A process that goes away leaves its part to be done in place, and the others to go on.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import pickle

import msgspec
import numpy as np

from rose_embed.engine.contract.batch import split_flat
from rose_embed.server.processes.part_processes import HEADER_BYTES, frame, payload_length

logger = logging.getLogger("rose_embed.server")
_READ_LIMIT = 1 << 24  # bytes a connection's reader buffers: a part's answer fits at once
_CONNECT_TIMEOUT_S = 120.0  # a process loads its tokenizer before it answers the first time


class _Gone(Exception):
    """The process holding a part went away before answering."""


class _Process:
    def __init__(self, address: str):
        self.address = address
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.part: asyncio.Future | None = None  # the part it is doing for this front end
        self.listening: asyncio.Task | None = None


class PartProcesses:
    def __init__(self, addresses: tuple[str, ...], first: int = 0):
        """`first`: the process this front end tries first, so that front ends start on different ones."""
        shift = first % len(addresses) if addresses else 0
        self._processes = [_Process(a) for a in addresses[shift:] + addresses[:shift]]
        self._idle: collections.deque[_Process] = collections.deque()
        self._waiting: collections.deque[tuple[tuple, asyncio.Future]] = collections.deque()

    @property
    def num_processes(self) -> int:
        return len(self._processes)

    @property
    def is_usable(self) -> bool:
        return bool(self._processes)

    async def connect(self) -> None:
        """Connect to every process and wait for its first answer; one that cannot be reached is left out."""
        await asyncio.gather(*(self._connect(p) for p in list(self._processes)))
        if self._processes:
            logger.info("%d part process(es) connected", len(self._processes))

    async def _connect(self, process: _Process) -> None:
        try:
            process.reader, process.writer = await asyncio.open_unix_connection(process.address, limit=_READ_LIMIT)
            process.writer.write(frame(("ping",)))
            await asyncio.wait_for(self._read(process), _CONNECT_TIMEOUT_S)
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
            logger.error("part process at %s cannot be reached (%s); doing its share in place", process.address, exc)
            self._drop(process)
            return
        process.listening = asyncio.ensure_future(self._listen(process))
        self._idle.append(process)

    async def tokenize(self, texts: list[str]) -> list[np.ndarray] | None:
        """Token ids per text, as TextTokenizer.encode gives them; None where no process is left
        to do it (the caller tokenizes in place)."""
        answer = await self._ask(("tokenize", texts))
        if answer is None:
            return None
        flat, lengths = answer
        return split_flat(flat, lengths)

    async def encode(self, vectors: np.ndarray, encoding_format: str, dimensions: int | None,
                     is_normalized: bool) -> list[msgspec.Raw] | None:
        """compat.encoding.encode_embeddings' answer for the formats in ENCODED_FORMATS; None where no
        process is left to do it."""
        answer = await self._ask(("encode", vectors, encoding_format, dimensions, is_normalized))
        return None if answer is None else [msgspec.Raw(fragment) for fragment in answer]

    async def _ask(self, request: tuple):
        if not self._processes:
            return None
        part = asyncio.get_running_loop().create_future()
        self._waiting.append((request, part))
        self._hand_out()
        try:
            return await part
        except _Gone:
            return None

    def _hand_out(self) -> None:
        while self._waiting and self._idle:
            request, part = self._waiting.popleft()
            if part.done():  # its request went away
                continue
            process = self._idle.popleft()
            process.part = part
            process.writer.write(frame(request))

    async def _read(self, process: _Process):
        header = await process.reader.readexactly(HEADER_BYTES)
        return pickle.loads(await process.reader.readexactly(payload_length(header)))

    async def _listen(self, process: _Process) -> None:
        while True:
            try:
                answer = await self._read(process)
            except (OSError, EOFError, asyncio.IncompleteReadError):
                logger.error("a part process went away; its part is done in place")
                self._drop(process)
                return
            except Exception as exc:  # an answer that does not unpickle fails its part, not the connection
                answer = exc
            part, process.part = process.part, None
            self._idle.append(process)
            if part is not None and not part.done():
                if isinstance(answer, BaseException):
                    part.set_exception(answer)
                else:
                    part.set_result(answer)
            self._hand_out()

    def _drop(self, process: _Process) -> None:
        if process in self._processes:
            self._processes.remove(process)
        if process in self._idle:
            self._idle.remove(process)
        if process.writer is not None:
            process.writer.close()
        if process.part is not None and not process.part.done():
            process.part.set_exception(_Gone())
        if not self._processes:
            self._fail_waiting()

    def _fail_waiting(self) -> None:
        while self._waiting:
            _, part = self._waiting.popleft()
            if not part.done():
                part.set_exception(_Gone())

    def close(self) -> None:
        for process in list(self._processes):
            if process.listening is not None:
                process.listening.cancel()
            self._drop(process)
