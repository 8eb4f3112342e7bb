"""The server's listening sockets, bound before anything starts.

Bound once the flags are checked and before the app starts, a taken port (or an address this
host does not have) is one line and a non-zero exit within a second or two, with no engine
process, shared memory or banner yet; uvicorn is then handed the bound sockets instead of
binding late itself, after the engines have started.
"""

from __future__ import annotations

import os
import socket


# Where no --port is given, the port: one setting read both by the server and by whatever looks
# for it there (the image's HEALTHCHECK, Dockerfile).
PORT_ENV = "ROSE_EMBED_PORT"


class ListenError(OSError):
    """The port cannot be had; the message names host:port and the reason."""


# uvicorn's default backlog; uvicorn listens again with its own when it starts, which only sets it anew.
_BACKLOG = 2048


def bind_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """One socket for a single-process server; `count` > 1: one per front end, sharing the port
    (SO_REUSEPORT) so that the kernel spreads new connections over them. The first socket
    listens at once, so that the port takes connections (queued until the app answers them)
    from the moment the banner says it is served; the others of a shared set listen as their
    front ends start (server/processes/front_end.py says why). Raises ListenError."""
    try:
        if count == 1:
            sock = _bound(host, port, reuse_port=False)
            _listen(sock)
            return [sock]
        # SO_REUSEPORT would also share the port with another server that set it: a probe
        # without it fails where anything at all holds the port.
        _bound(host, port, reuse_port=False).close()
        sockets: list[socket.socket] = []
        try:
            for _ in range(count):
                sockets.append(_bound(host, port, reuse_port=True))
            _listen(sockets[0])
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        return sockets
    except OSError as exc:
        raise ListenError(f"cannot listen on {address(host, port)}: {exc.strerror or exc}") from None


def address(host: str, port: int) -> str:
    """host:port as a URL writes it: an IPv6 address in brackets ([::1]:8000)."""
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def port_env_warning(port: int) -> str | None:
    """One line where --port moves the server off the port $ROSE_EMBED_PORT names, where others look for it."""
    named = os.environ.get(PORT_ENV, "").strip()
    if not named or named == str(port):
        return None
    return (f"--port {port} is not ${PORT_ENV} ({named}), where whatever reads it looks for this server "
            f"(the image's health check): set ${PORT_ENV}={port} instead")


def _listen(sock: socket.socket) -> None:
    try:
        sock.listen(_BACKLOG)
    except BaseException:
        sock.close()
        raise


def _bound(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past a previous run's TIME_WAIT, as uvicorn
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host.strip("[]"), port))
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock
