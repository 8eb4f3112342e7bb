"""The part processes: one pool per server that tokenizes large requests' parts and encodes their
vectors, for every front end.

A front end's event loop is one core. A request of a thousand texts would have it tokenize
every part (the default models' WordPiece encodes in Python, holding the GIL), then encode
every vector, while the device waits for the next part and the other cores idle. The part
processes do that work side by side: a front end hands a part's texts, or a part's vectors,
to whichever process of the pool is free, and goes on routing pieces and answers.

The supervisor starts the pool before the front ends (`start_part_processes`), each process
on a Unix socket the supervisor has bound, so that any front end, a restarted one too,
connects whenever it starts (server/pipeline/part_process_client.py). A process answers its
connections one request at a time, in turn; it imports neither torch nor the model's weights,
and it ends with the supervisor.

Messages are pickled, each behind its length.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import selectors
import shutil
import socket
import struct
import tempfile
from dataclasses import dataclass, field


from rose_embed.engine.contract.parent_watch import exit_with_parent

_LENGTH = struct.Struct("<Q")
# The formats a part process encodes: float, whose decimal formatting costs a front end more than
# the round trip. Base64 (SIMD over the whole array, compat/vector_wire.py) and the quantised
# formats cost less in place than the vectors' pickling to a process and back.
ENCODED_FORMATS = ("float",)


def frame(message) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(payload)) + payload


def payload_length(header: bytes) -> int:
    return _LENGTH.unpack(header)[0]


HEADER_BYTES = _LENGTH.size


@dataclass
class PartProcessPool:
    """The pool's processes and the socket addresses front ends connect to."""

    addresses: tuple[str, ...]
    processes: list = field(default_factory=list)
    directory: str | None = None

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(5)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_part_processes(tokenizer_recipe: tuple, num_processes: int, parent_pid: int | None = None) -> PartProcessPool:
    """`num_processes` processes, each with a copy of the tokenizer `tokenizer_recipe` builds
    (TextTokenizer.recipe), listening at once: a front end may connect before they have loaded."""
    directory = tempfile.mkdtemp(prefix="rose-parts-")
    context = multiprocessing.get_context("spawn")
    pool = PartProcessPool(tuple(os.path.join(directory, f"{i}.sock") for i in range(num_processes)),
                           directory=directory)
    for address in pool.addresses:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(address)
        listener.listen(64)
        process = context.Process(target=_serve, args=(listener, tokenizer_recipe, parent_pid or os.getpid()),
                                  name="rose-parts", daemon=True)
        process.start()
        listener.close()  # the process holds its own copy
        pool.processes.append(process)
    return pool


def _serve(listener: socket.socket, tokenizer_recipe: tuple, parent_pid: int) -> None:
    """A part process: answers each connection's requests, one at a time, until it is stopped."""
    # A supervisor killed outright leaves no process behind, nor the sockets' folder.
    exit_with_parent(parent_pid, lambda: _leave(listener.getsockname()))
    from rose_embed.engine.contract.memory import keep_freed_memory
    from rose_embed.engine.text.tokenizer import TextTokenizer

    keep_freed_memory()  # each part's ids and answers reuse the last one's memory

    tokenizer = TextTokenizer(*tokenizer_recipe)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.setblocking(True)
                selector.register(conn, selectors.EVENT_READ)
                continue
            conn = key.fileobj
            try:
                request = _receive(conn)
                conn.sendall(_framed_answer(tokenizer, request))
            except (EOFError, OSError):  # the front end is gone
                selector.unregister(conn)
                conn.close()


def _leave(address: str) -> None:
    """Remove this process's socket (and the folder, once the last one has gone), then exit."""
    for remove, path in ((os.unlink, address), (os.rmdir, os.path.dirname(address))):
        try:
            remove(path)
        except OSError:  # another process's socket is still there, or it was removed already
            pass
    os._exit(0)


def _receive(conn: socket.socket):
    header = _read_exactly(conn, HEADER_BYTES)
    return pickle.loads(_read_exactly(conn, payload_length(header)))


def _read_exactly(conn: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = conn.recv_into(view[got:])
        if n == 0:
            raise EOFError
        got += n
    return data


def _framed_answer(tokenizer, request) -> bytes:
    answer = _answer(tokenizer, request)
    try:
        return frame(answer)
    except Exception:  # an exception that does not pickle still reaches the front end, as its text
        return frame(RuntimeError(f"{type(answer).__name__}: {answer}"))


def _answer(tokenizer, request):
    """What a request asks for, or the exception it raised (the front end raises it where the
    work in place would have)."""
    kind, *args = request
    try:
        if kind == "tokenize":
            return tokenizer.encode_flat(args[0])
        if kind == "encode":
            from rose_embed.compat.encoding import encode_embeddings

            return [bytes(fragment) for fragment in encode_embeddings(*args)]
        if kind == "ping":
            return "pong"
        raise ValueError(f"unknown request {kind!r}")
    except Exception as exc:
        return exc
