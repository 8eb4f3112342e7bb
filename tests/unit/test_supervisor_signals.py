"""SIGTERM and SIGINT while the server starts (server/processes/stop_signal.py, server/http/pending_stop_server.py):
the handler raises its stop at whatever line the main thread is on, in library code too; the
stop must reach the supervisor as itself, not at all while a spawn is being written or the front
end's libraries import, and still stop uvicorn where code on the way swallowed the raise."""

from __future__ import annotations

import enum
import gc
import os
import signal
import socket
import threading

import pytest

from rose_embed.server.processes import front_end
from rose_embed.server.processes.stop_signal import HANDLED_SIGNALS, StopSignal, Terminated

# Each stop signal and what the handler raises for it: Ctrl-C stays a KeyboardInterrupt.
RAISED = pytest.mark.parametrize("sig, raised", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)],
                                 ids=["sigterm", "sigint"])


@pytest.fixture
def stop():
    previous = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
    handler = StopSignal()
    handler.install()
    yield handler
    for sig, action in previous.items():
        signal.signal(sig, action)


def _class_with_a_descriptor(sig: int) -> None:
    """Make a class, as an import does, with `sig` arriving inside its attribute's `__set_name__`,
    where Python turns whatever is raised into a RuntimeError."""

    class Descriptor:
        def __set_name__(self, owner, name):
            os.kill(os.getpid(), sig)

    class Imported:
        attribute = Descriptor()


def test_a_stop_inside_enum_machinery_is_not_turned_into_a_type_error(stop):
    """A SIGTERM while `import uvicorn` imports ssl lands inside enum's building of ssl.Purpose,
    which turns any Exception from a member's value type into a TypeError: the server then
    printed a traceback instead of stopping cleanly."""

    class ValueTypeHitBySignal(int):
        def __new__(cls, *args):
            stop.handle(signal.SIGTERM, None)

    with pytest.raises(Terminated):

        class Purpose(ValueTypeHitBySignal, enum.Enum):
            def __new__(cls, value):
                return int.__new__(cls, value)

            SERVER_AUTH = 1


@RAISED
def test_a_stop_passes_through_except_exception(stop, sig, raised):
    with pytest.raises(raised):
        try:
            os.kill(os.getpid(), sig)
        except Exception:  # what library code does
            pytest.fail("the stop was caught as an ordinary error")


@RAISED
def test_a_deferred_stop_is_raised_when_the_block_ends(stop, sig, raised):
    reached_the_end = False
    with pytest.raises(raised):
        with stop.deferred():
            os.kill(os.getpid(), sig)
            reached_the_end = True
    assert reached_the_end and stop.pending() == sig


@RAISED
def test_a_stop_inside_set_name_is_raised_as_itself_once_deferred(stop, sig, raised):
    """Ctrl-C while the supervisor imported uvicorn for its one front end landed in a class's
    `__set_name__`: a RuntimeError and a traceback instead of a clean stop."""
    with pytest.raises(raised):
        with stop.deferred():
            _class_with_a_descriptor(sig)
    assert stop.pending() == sig


class _NeverRun:
    def run(self, sockets):
        pytest.fail("the front end was served after a stop signal")


def test_the_front_end_is_built_with_stop_signals_deferred(stop, monkeypatch):
    """run_front_end imports its libraries and builds its app before the stop is raised."""
    built = []

    def build(*_args):
        _class_with_a_descriptor(signal.SIGINT)
        built.append(True)
        return _NeverRun()

    monkeypatch.setattr(front_end, "_uvicorn_server", build)
    with pytest.raises(KeyboardInterrupt):
        front_end.run_front_end(None, None, [], stop=stop)
    assert built and stop.pending() == signal.SIGINT


def test_no_stop_no_raise(stop):
    with stop.deferred():
        pass
    assert stop.pending() is None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the finaliser's, on purpose
def test_a_stop_swallowed_on_the_way_still_stops_uvicorn(stop):
    """The raise lands in a finaliser, which only prints it; uvicorn, started afterwards with
    the noted stop, shuts down at once and raises SIGTERM again, which reaches the handler."""
    import uvicorn

    from rose_embed.server.http.pending_stop_server import uvicorn_server

    class Finalised:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)

    Finalised()  # its __del__ runs here; what the handler raised is printed, not propagated
    gc.collect()
    assert stop.pending() == signal.SIGTERM

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn_server(uvicorn.Config(app, log_config=None, lifespan="on"), stop.pending)
    # Should the noted stop not reach it, the server ends anyway, and the test fails, not hangs.
    watchdog = threading.Timer(10.0, lambda: setattr(server, "should_exit", True))
    watchdog.start()
    try:
        with pytest.raises(Terminated):
            server.run(sockets=[sock])
    finally:
        watchdog.cancel()
        sock.close()
