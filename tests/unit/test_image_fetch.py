"""The image fetcher's address check: which addresses are public, and that a redirect's target is checked
as the first URL is, before any connection to it."""

from __future__ import annotations

import asyncio
import ipaddress
import shutil
import ssl
import subprocess
import time

import pytest

from rose_embed.engine.image.decode import ImageInputError
from rose_embed.server.pipeline.image_fetch import FetchLimits, ImageFetcher, is_fetched_url, is_public_address
from tests.support.image_server import image_server


@pytest.mark.parametrize("address, public", [
    ("93.184.215.14", True), ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", True), ("8.8.8.8", True),
    ("127.0.0.1", False), ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.1.1", False),
    ("169.254.169.254", False), ("100.64.0.1", False), ("0.0.0.0", False), ("224.0.0.1", False),
    ("::1", False), ("fe80::1", False), ("fc00::1", False), ("::", False), ("::ffff:127.0.0.1", False),
    ("::ffff:10.0.0.1", False), ("::ffff:8.8.8.8", True),
])
def test_public_addresses(address, public):
    assert is_public_address(ipaddress.ip_address(address)) is public


@pytest.mark.parametrize("url, fetched", [("http://a/b.png", True), ("HTTPS://a/b.png", True),
                                          ("data:image/png;base64,AAAA", False), ("ftp://a/b.png", False)])
def test_which_urls_are_fetched(url, fetched):
    assert is_fetched_url(url) is fetched


def test_a_redirect_target_is_checked_before_connecting():
    """Only 127.0.0.1 allowed: the first URL is fetched, its redirect to 127.0.0.2 refused by the check."""
    files = {"/cat.png": ("image/png", b"\x89PNG not really")}
    allowed = ipaddress.ip_address("127.0.0.1")

    async def fetch(url: str) -> bytes:
        fetcher = ImageFetcher(is_allowed=lambda address: address == allowed)
        try:
            return await fetcher.fetch(url)
        finally:
            await fetcher.aclose()

    with image_server(files) as web:
        assert asyncio.run(fetch(web.url("/cat.png"))) == files["/cat.png"][1]
        with pytest.raises(ImageInputError, match="the host '127.0.0.2' resolves to 127.0.0.2, which is not a public"):
            asyncio.run(fetch(web.url("/redirect?to=" + web.url("/cat.png", host="127.0.0.2"))))
        with pytest.raises(ImageInputError, match="redirects more than 3 times"):
            loop = web.url("/redirect?to=" + web.url("/redirect?to=" + web.url("/redirect?to=" + web.url(
                "/redirect?to=" + web.url("/cat.png")))))
            asyncio.run(fetch(loop))


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str]:
    """A self-signed certificate for the name localhost only, and its key."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command makes the test's certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


def test_https_checks_the_certificate_against_the_host_name_while_connecting_to_its_checked_address(certificate):
    """The connection goes to the address the check passed, yet TLS names and verifies the URL's host: a
    certificate for localhost is good for https://localhost, not for https://127.0.0.1."""
    cert, key = certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    files = {"/cat.png": ("image/png", b"\x89PNG not really")}

    async def fetch(url: str) -> bytes:
        fetcher = ImageFetcher(is_allowed=lambda address: address.is_loopback,
                               verify=ssl.create_default_context(cafile=cert))
        try:
            return await fetcher.fetch(url)
        finally:
            await fetcher.aclose()

    with image_server(files, tls=tls) as web:
        assert asyncio.run(fetch(web.url("/cat.png", host="localhost"))) == files["/cat.png"][1]
        with pytest.raises(ImageInputError, match="cannot be fetched .*(certificate|IP address mismatch)"):
            asyncio.run(fetch(web.url("/cat.png")))


def test_fetches_beyond_the_concurrency_limit_wait_for_a_slot_outside_their_timeout():
    """Two slots, twelve URLs answered in 0.2 s each: six waves, 1.2 s in all, past the 1 s timeout that
    each fetch's own 0.2 s keeps within; every file arrives whole."""
    files = {"/cat.png": ("image/png", b"\x89PNG not really")}
    limits = FetchLimits(timeout_s=1.0, max_concurrent=2)

    async def fetch_all(urls: list[str]) -> tuple[list[bytes], float]:
        fetcher = ImageFetcher(allow_private=True, limits=limits)
        start = time.monotonic()
        try:
            return await asyncio.gather(*map(fetcher.fetch, urls)), time.monotonic() - start
        finally:
            await fetcher.aclose()

    with image_server(files, slow_s=0.2) as web:
        got, seconds = asyncio.run(fetch_all([web.url("/slow")] * 12))
    assert got == [files["/cat.png"][1]] * 12
    assert seconds >= 6 * 0.2, seconds  # never more than two at once
