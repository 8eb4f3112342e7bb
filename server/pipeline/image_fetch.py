"""An image input given as an http(s) URL -> the bytes of its file, fetched by the front end within limits.

A URL in a request makes the server a client of whatever the URL names, so the fetch is bounded: the
whole fetch within a timeout, the body within the image file limit (a declared Content-Length over it
is refused before reading, a body that grows past it is cut off), a few redirects, a content type that
can be an image, and no connection to a private, loopback, link-local or otherwise non-public address
unless the server was started with --allow-private-image-urls. The address check sits where the
connection is made (the connection pool's network backend): the host is resolved, every address it
resolves to is checked, and the connection goes to a checked address, so that neither a redirect nor a
DNS answer that changes between a check and the connect can reach an address the check refused.
Environment proxies are ignored for the same reason (a proxy would make the connection instead).

At most `max_concurrent` fetches run at once in a front end, so many URLs (in one request or many) cannot
make it hold more than that many files. The fetch is asynchronous, on the event loop (it waits on sockets
only); every refusal is an ImageInputError saying why, which the route turns into a 400 naming the input.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import httpcore
import httpx

from rose_embed.engine.image.decode import ImageInputError, ImageLimits

AddressCheck = Callable[[ipaddress.IPv4Address | ipaddress.IPv6Address], bool]
# What a server may answer for an image file besides image/*: some serve every file as bytes.
_BYTES_TYPES = ("application/octet-stream", "binary/octet-stream")
# How much of a URL a refusal repeats: enough to recognise it, not a whole data-laden query string.
_SHOWN_URL_CHARS = 120


def is_fetched_url(url: str) -> bool:
    """An image input the front end fetches (any other is a data: URI, or refused when decoded)."""
    return url[:8].lower().startswith(("http://", "https://"))


@dataclass(frozen=True)
class FetchLimits:
    max_bytes: int = ImageLimits.max_bytes  # a file's limit, as a data: URI's
    timeout_s: float = 10.0  # the whole fetch: connecting, redirects and the body
    max_redirects: int = 3
    # Fetches a front end runs at once (the others wait, outside their timeout): each may hold a file of
    # max_bytes, so this bounds what image URLs, however many requests name, make a front end hold.
    max_concurrent: int = 16


def is_public_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """An address on the public internet: not private, loopback, link-local, shared (CGNAT), reserved,
    unspecified or multicast; an IPv4 address written as IPv6 is judged as the IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


class _RefusedAddress(Exception):
    """Raised where a connection would go to an address the check refuses; said to the client."""


class _CheckedBackend(httpcore.AsyncNetworkBackend):
    """The pool's network backend that resolves a host itself and connects only to an address that passes
    `is_allowed`, after checking every address the host resolves to."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend, is_allowed: AddressCheck):
        self._inner = inner
        self._is_allowed = is_allowed

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options=None) -> httpcore.AsyncNetworkStream:
        try:
            found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError(f"the host {host!r} cannot be resolved ({exc})") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in found))
        refused = [a for a in addresses if not self._is_allowed(a)]
        if refused or not addresses:
            raise _RefusedAddress(f"the host {host!r} resolves to {refused[0] if refused else 'no address'}, which is "
                                  "not a public address; private, loopback and link-local addresses are fetched only "
                                  "where the server runs with --allow-private-image-urls")
        failed = None
        for address in addresses:  # in the resolver's order, as a plain connect tries them
            try:
                return await self._inner.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failed = exc
        raise failed

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise _RefusedAddress("images are not fetched over Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CheckedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a pool whose connections go through _CheckedBackend. httpx takes no
    network backend of its own, so the pool it would make is replaced by one that has it (the
    transport sends every request through `_pool`)."""

    def __init__(self, is_allowed: AddressCheck, verify: ssl.SSLContext | None):
        super().__init__(trust_env=False, retries=0)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=verify or httpx.create_ssl_context(trust_env=False),
            network_backend=_CheckedBackend(httpcore.AnyIOBackend(), is_allowed))


class ImageFetcher:
    """One front end's client for image URLs; `aclose` when the front end stops. `verify`: the TLS context
    that checks servers' certificates (None: httpx's, over certifi's authorities)."""

    def __init__(self, allow_private: bool = False, limits: FetchLimits = FetchLimits(),
                 is_allowed: AddressCheck | None = None, verify: ssl.SSLContext | None = None):
        self.limits = limits
        self._slots = asyncio.Semaphore(limits.max_concurrent)
        check = is_allowed or ((lambda address: True) if allow_private else is_public_address)
        self._client = httpx.AsyncClient(transport=_CheckedTransport(check, verify), trust_env=False,
                                         follow_redirects=True, max_redirects=limits.max_redirects,
                                         timeout=limits.timeout_s, headers={"Accept": "image/*"})

    async def fetch(self, url: str) -> bytes:
        """The file at `url` (http or https); ImageInputError saying why it cannot be had."""
        try:
            async with self._slots, asyncio.timeout(self.limits.timeout_s):
                return await self._fetch(url)
        except (TimeoutError, httpx.TimeoutException):
            raise ImageInputError(f"fetching {_shown(url)} took longer than {self.limits.timeout_s:g} s") from None
        except _RefusedAddress as exc:
            raise ImageInputError(f"{_shown(url)} is not fetched: {exc}") from None
        except httpx.TooManyRedirects:
            raise ImageInputError(f"{_shown(url)} redirects more than {self.limits.max_redirects} times") from None
        except httpx.UnsupportedProtocol:
            raise ImageInputError(f"{_shown(url)} redirects to a URL that is not http(s)") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ImageInputError(f"{_shown(url)} cannot be fetched ({exc or type(exc).__name__})") from None

    async def _fetch(self, url: str) -> bytes:
        limit = self.limits.max_bytes
        async with self._client.stream("GET", url) as response:
            if response.status_code != 200:
                raise ImageInputError(f"{_shown(url)} answered HTTP {response.status_code}, not an image")
            media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if media_type and not media_type.startswith("image/") and media_type not in _BYTES_TYPES:
                raise ImageInputError(f"{_shown(url)} answered content of type {media_type!r}, not an image")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise ImageInputError(f"{_shown(url)} holds {int(declared)} bytes, more than the image limit of "
                                      f"{limit} bytes")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    raise ImageInputError(f"{_shown(url)} holds more than the image limit of {limit} bytes")
            return bytes(body)

    async def aclose(self) -> None:
        await self._client.aclose()


def _shown(url: str) -> str:
    return repr(url if len(url) <= _SHOWN_URL_CHARS else url[:_SHOWN_URL_CHARS] + "...")
