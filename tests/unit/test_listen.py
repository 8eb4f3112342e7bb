"""The port, bound before anything starts (server/processes/listen.py), and the banner's address."""

from __future__ import annotations

import re
import socket

import pytest

from rose_embed.server.cli.main import _banner, build_parser
from rose_embed.server.config import ServerConfig
from rose_embed.server.processes.listen import ListenError, address, bind_sockets, port_env_warning
from tests.conftest import REPO


def _free_port(family: int = socket.AF_INET, host: str = "127.0.0.1") -> int:
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("count", [1, 2])
def test_the_port_takes_connections_once_bound(count):
    """The banner follows bind_sockets: a client that connects then must not be refused."""
    port = _free_port()
    sockets = bind_sockets("127.0.0.1", port, count)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # queued by the kernel until the app accepts it
    finally:
        for sock in sockets:
            sock.close()


def test_a_taken_port_is_refused_with_its_address():
    port = _free_port()
    (held,) = bind_sockets("127.0.0.1", port, 1)
    try:
        with pytest.raises(ListenError, match=f"^cannot listen on 127.0.0.1:{port}: "):
            bind_sockets("127.0.0.1", port, 1)
    finally:
        held.close()


@pytest.mark.parametrize("host, port, written", [
    ("127.0.0.1", 8000, "127.0.0.1:8000"),
    ("localhost", 80, "localhost:80"),
    ("::1", 8000, "[::1]:8000"),
    ("[::1]", 8000, "[::1]:8000"),
    ("::", 9000, "[::]:9000"),
    ("fe80::1%eth0", 8000, "[fe80::1%eth0]:8000"),
])
def test_address_writes_ipv6_in_brackets(host, port, written):
    assert address(host, port) == written


def test_banner_writes_an_ipv6_host_in_brackets(capsys):
    _banner(ServerConfig(host="::1", port=8123), "model")
    assert capsys.readouterr().out == (
        "rose-embed: serving model on http://[::1]:8123/v1 (GET /health turns 200 once ready)\n")


@pytest.mark.skipif(not _ipv6_loopback(), reason="needs an IPv6 loopback")
def test_an_ipv6_host_binds_and_takes_connections():
    port = _free_port(socket.AF_INET6, "::1")
    (sock,) = bind_sockets("::1", port, 1)
    try:
        with socket.create_connection(("::1", port), timeout=2):
            pass
    finally:
        sock.close()


@pytest.mark.parametrize("page", ["README.md", "docs/serve.md"])
def test_the_docs_quote_the_banner_as_printed(page, capsys):
    _banner(ServerConfig(), "sentence-transformers/all-MiniLM-L6-v2")
    printed = capsys.readouterr().out.strip()
    quoted = re.findall(r"`(rose-embed: serving [^`]+)`", (REPO / page).read_text(encoding="utf-8"))
    assert quoted == [printed]


def test_the_port_defaults_to_rose_embed_port(monkeypatch):
    monkeypatch.delenv("ROSE_EMBED_PORT", raising=False)
    assert build_parser().parse_args(["serve"]).port == 8000
    monkeypatch.setenv("ROSE_EMBED_PORT", "9001")
    assert build_parser().parse_args(["serve"]).port == 9001
    assert build_parser().parse_args(["serve", "--port", "9002"]).port == 9002  # the flag wins
    monkeypatch.setenv("ROSE_EMBED_PORT", " ")
    assert build_parser().parse_args(["serve"]).port == 8000  # blank: not set


@pytest.mark.parametrize("value, message", [
    ("99999", "argument --port: must be a TCP port, 1 to 65535; got 99999 (from $ROSE_EMBED_PORT)"),
    ("http", "argument --port: must be a whole number; got 'http' (from $ROSE_EMBED_PORT)"),
])
def test_a_wrong_rose_embed_port_is_refused_naming_it(value, message, monkeypatch, capsys):
    monkeypatch.setenv("ROSE_EMBED_PORT", value)
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"rose-embed serve: error: {message}"


def test_a_port_off_rose_embed_port_is_warned_of(monkeypatch):
    monkeypatch.delenv("ROSE_EMBED_PORT", raising=False)
    assert port_env_warning(9000) is None
    monkeypatch.setenv("ROSE_EMBED_PORT", "9000")
    assert port_env_warning(9000) is None
    assert port_env_warning(9001) == (
        "--port 9001 is not $ROSE_EMBED_PORT (9000), where whatever reads it looks for this server (the image's "
        "health check): set $ROSE_EMBED_PORT=9001 instead")
