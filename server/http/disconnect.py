"""A client that goes away while its request is computed: what ends the request early with a 499."""

from __future__ import annotations

from litestar import Request


async def wait_for_disconnect(request: Request) -> None:
    """Returns when the client goes away (the body is already read, so only that is left)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
