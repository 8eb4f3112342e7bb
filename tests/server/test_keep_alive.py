"""An idle keep-alive connection outlives common clients' pool expiry (httpx 5 s, aiohttp 15 s):
the client closes it first, so no request meets a connection the server is closing
(`--keep-alive-timeout`, server/config.py says why 75 s)."""

from __future__ import annotations

import http.client
import json
import time

import pytest

from rose_embed.server.cli.main import build_parser, config_from_args
from tests.conftest import ServerProcess
from tests.support.helpers import MODEL

HTTPX_POOL_EXPIRY = 5.0  # httpx's keepalive_expiry, and uvicorn's own default keep-alive
AIOHTTP_KEEPALIVE = 15.0  # aiohttp's TCPConnector keepalive_timeout


def parse(*flags: str):
    return config_from_args(build_parser().parse_args(["serve", "--devices", "cpu", *flags]))


def test_the_flag_reaches_the_config_and_the_default_outlasts_the_clients():
    assert parse().keep_alive_timeout > AIOHTTP_KEEPALIVE > HTTPX_POOL_EXPIRY
    assert parse("--keep-alive-timeout", "20").keep_alive_timeout == 20.0
    assert parse("--keep-alive-timeout", "0.5").keep_alive_timeout == 0.5


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_keep_alive_timeout_must_be_seconds_above_zero(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", "--keep-alive-timeout", value])
    assert exit_info.value.code == 2
    assert f"argument --keep-alive-timeout: must be a number of seconds above 0; got {value}" in capsys.readouterr().err


def _post(conn: http.client.HTTPConnection, text: str) -> dict:
    conn.request("POST", "/v1/embeddings", json.dumps({"model": MODEL, "input": [text]}),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    body = response.read()
    assert response.status == 200, body
    assert response.getheader("connection", "").lower() != "close"
    return json.loads(body)


@pytest.mark.slow
def test_an_idle_keep_alive_connection_past_the_old_5_s_boundary_still_serves(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        first = _post(conn, "before the pause")
        sock = conn.sock
        time.sleep(HTTPX_POOL_EXPIRY + 1.5)  # idle past uvicorn's old default, where httpx's pool races it
        second = _post(conn, "after the pause")  # http.client does not reconnect silently: it would raise
        assert conn.sock is sock  # the same connection answered both
        assert len(second["data"][0]["embedding"]) == len(first["data"][0]["embedding"]) == 384
    finally:
        conn.close()


@pytest.mark.slow
def test_the_flag_reaches_uvicorn_an_idle_connection_is_closed_after_it():
    # A small token budget: it starts sooner, and one short text is all this test embeds.
    proc = ServerProcess("--devices", "cpu", "--max-batch-tokens", "512", "--keep-alive-timeout", "1")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=30)
        _post(conn, "then idle")
        conn.sock.settimeout(10)
        started = time.monotonic()
        assert conn.sock.recv(1) == b""  # the server closed the idle connection
        assert time.monotonic() - started < HTTPX_POOL_EXPIRY  # after about 1 s, not the default
        conn.close()
    finally:
        proc.stop()
