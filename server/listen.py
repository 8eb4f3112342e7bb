"""The server's listening sockets, bound before anything starts.

Bound once the flags are checked and before the app starts, a taken port (or an address this
host does not have) is one line and a non-zero exit within a second or two, with no engine
process, shared memory or banner yet; uvicorn is then handed the bound sockets instead of
binding late itself, after the engines have started.
"""

from __future__ import annotations

import socket


class ListenError(OSError):
    """The port cannot be had; the message names host:port and the reason."""


def bind_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """One socket for a single-process server; `count` > 1: one per front end, sharing the port
    (SO_REUSEPORT) so that the kernel spreads new connections over them. Only the first of a
    shared set listens yet (server/front_end.py says why); uvicorn makes the others
    listen as their front ends start. Raises ListenError."""
    try:
        if count == 1:
            return [_bound(host, port, reuse_port=False)]
        # SO_REUSEPORT would also share the port with another server that set it: a probe
        # without it fails where anything at all holds the port.
        _bound(host, port, reuse_port=False).close()
        sockets: list[socket.socket] = []
        try:
            for _ in range(count):
                sockets.append(_bound(host, port, reuse_port=True))
            sockets[0].listen(2048)
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        return sockets
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


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
