"""What a hostile or broken client does to a front end's HTTP layer (server/http/guarded_http.py), over
real sockets to uvicorn in a thread (fake engine): a header of megabytes, a slow loris, more
connections than allowed, bytes that are no HTTP, an upload cut off mid-body, a slow upload
when the server stops. The same against a real server process: test_untrusted_clients_server.py.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from rose_embed.server.http.logs import ACCESS_LOGGER
from tests.conftest import REPO
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config
from tests.support.helpers import assert_envelope, sample
from tests.support.raw_http import (MiB, huge_header_while_polling_health, read_response, read_until_closed,
                             split_response)
from tests.support.uvicorn_thread import serve_in_thread


def _envelope(data: bytes, status: int, code: str) -> tuple[dict, dict]:
    """The raw response's error (checked as assert_envelope checks any) and its headers."""
    got, headers, body = split_response(data)
    assert got == status, data[:300]
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    return assert_envelope(httpx.Response(status, content=body), status, code), headers


@pytest.fixture(scope="module")
def served():
    with serve_in_thread(fake_config()) as running:
        yield running


def _refused(url: str, code: str) -> float:
    return sample(httpx.get(url + "/metrics").text, f'rose_http_refused_total{{code="{code}"}}')


def test_a_64_mib_header_gets_431_at_once_and_health_stays_responsive(served):
    before = _refused(served.url, "request_headers_too_large")
    data, seconds, longest = huge_header_while_polling_health(served.url, served.port, 64 * MiB)
    assert _refused(served.url, "request_headers_too_large") == before + 1
    error, _ = _envelope(data, 431, "request_headers_too_large")
    assert "32768 bytes" in error["message"] and error["type"] == "invalid_request_error"
    # Before the cap, parsing the header held the loop for seconds; /health waited with it.
    assert seconds < 1.0, seconds
    assert longest < 1.0, longest


@pytest.mark.parametrize("writes", [1, 8], ids=["one write", "in pieces"])
def test_a_head_within_the_cap_is_served_and_one_past_it_is_not(served, writes):
    def get_health(header_bytes: int) -> bytes:
        head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * header_bytes + b"\r\nConnection: close\r\n\r\n"
        with served.connect() as sock:
            piece = -(-len(head) // writes)
            for i in range(0, len(head), piece):
                sock.sendall(head[i:i + piece])
                time.sleep(0.01 if writes > 1 else 0)
            return read_until_closed(sock)

    assert split_response(get_health(32 * 1024 - 200))[0] == 200
    _envelope(get_health(32 * 1024), 431, "request_headers_too_large")


def test_bodies_and_pipelined_requests_are_not_counted_as_a_head(served):
    fake = FakeEngine()
    texts = [f"text number {i} " * 20 for i in range(1000)]  # a body of about 300 kB, past the head's cap tenfold
    r = httpx.post(served.url + "/v1/embeddings", json={"model": FAKE_MODEL, "input": texts, "encoding_format": "float"},
                   timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["data"][-1]["embedding"] == pytest.approx(fake.embed(texts[-1:])[0].tolist(), abs=1e-6)
    # 40 requests of 1 kB heads in one write: 40 kB in all, each head well within the cap.
    one = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 1000 + b"\r\n\r\n"
    with served.connect() as sock:
        sock.sendall(one * 39 + one.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        data = read_until_closed(sock)
    assert data.count(b"HTTP/1.1 200 OK") == 40 and b" 431 " not in data


def test_a_slow_loris_is_closed_after_the_header_timeout_and_an_idle_connection_after_keep_alive():
    config = fake_config(header_timeout=0.5, keep_alive_timeout=1.0)
    with serve_in_thread(config) as served:
        idle = served.connect()
        lorises = [served.connect() for _ in range(20)]
        for sock in lorises:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        answers = {}

        def trickle(i: int, sock: socket.socket) -> None:
            sock.settimeout(0.2)
            data = b""
            while time.monotonic() - started < 10:
                try:
                    sock.sendall(b"X-a: b\r\n")
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue  # nothing yet: one more header line
                except OSError:
                    break
                if not chunk:
                    break
                data += chunk
            answers[i] = (data, time.monotonic() - started)

        with ThreadPoolExecutor(len(lorises)) as pool:
            list(pool.map(trickle, range(len(lorises)), lorises))
        for data, elapsed in answers.values():
            _envelope(data, 408, "request_timeout")
            assert 0.4 < elapsed < 3.0, elapsed
        assert _refused(served.url, "request_timeout") == len(lorises)  # the silent one is no refusal
        idle.settimeout(10)
        assert read_until_closed(idle) == b""  # closed without a word: it never asked anything
        assert time.monotonic() - started < 4.0
        for sock in [idle, *lorises]:
            sock.close()
        deadline = time.monotonic() + 5
        while served.num_connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert served.num_connections() == 0
        assert httpx.get(served.url + "/health").status_code == 200


def test_the_header_timeout_bounds_the_head_alone_not_the_answer_nor_a_keep_alive_wait():
    """A head that came in pieces, then an answer that takes longer than the header timeout, then
    an idle spell longer than it on the kept-alive connection: all served."""
    body = b'{"input": ["slow to answer"]}'
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    with serve_in_thread(fake_config(header_timeout=0.3), FakeEngine(delay=0.8)) as served, served.connect() as sock:
        for _ in range(2):
            request = head % len(body) + body
            sock.sendall(request[:20])
            time.sleep(0.1)  # the head's first piece arms its timer
            sock.sendall(request[20:])
            data = read_response(sock)  # after the fake's 0.8 s batch
            assert split_response(data)[0] == 200, data[:300]
            time.sleep(0.5)  # idle, kept alive


def test_connections_past_the_cap_get_503_at_once_and_those_held_still_serve():
    with serve_in_thread(fake_config(max_connections=4)) as served:
        held = [httpx.Client(base_url=served.url, timeout=10) for _ in range(4)]
        try:
            for client in held:
                assert client.get("/health").status_code == 200  # each keeps its connection open
            assert served.num_connections() == 4
            with served.connect() as sock:
                started = time.monotonic()
                data = read_until_closed(sock)
            error, headers = _envelope(data, 503, "too_many_connections")
            assert time.monotonic() - started < 1.0
            assert sample(held[0].get("/metrics").text, 'rose_http_refused_total{code="too_many_connections"}') == 1
            assert error["type"] == "server_error" and headers["retry-after"] == "1"
            assert all(client.get("/health").status_code == 200 for client in held)
            held.pop().close()
            deadline = time.monotonic() + 5
            while served.num_connections() > 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert httpx.get(served.url + "/health").status_code == 200  # room again
        finally:
            for client in held:
                client.close()


@pytest.mark.parametrize("garbage", [b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
                                     b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"],
                         ids=["not http", "broken header", "tls hello"])
def test_bytes_that_are_no_http_get_400_in_the_envelope(served, garbage):
    before = _refused(served.url, "invalid_http_request")
    with served.connect() as sock:
        sock.sendall(garbage)
        error, _ = _envelope(read_until_closed(sock), 400, "invalid_http_request")
    assert error["type"] == "invalid_request_error"
    assert _refused(served.url, "invalid_http_request") == before + 1


def _cut_off_upload(port: int, reset: bool) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"X-Request-Id: cut-off-%d\r\nContent-Length: 100000\r\n\r\n{\"input\": [\"" % reset + b"a" * 5000)
        time.sleep(0.2)  # the server reads the part that came
        if reset:  # linger 0: close() sends RST instead of FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_a_client_that_leaves_mid_body_is_a_499_in_the_log_and_the_metrics(served, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    before = httpx.get(served.url + "/metrics").text
    for reset in (False, True):
        _cut_off_upload(served.port, reset)
    deadline = time.monotonic() + 5
    records = []
    while len(records) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        records = [r for r in caplog.records if r.name == ACCESS_LOGGER and r.fields["request_id"].startswith("cut-off")]
    assert sorted(r.fields["request_id"] for r in records) == ["cut-off-0", "cut-off-1"]
    assert [r.fields["status"] for r in records] == [499, 499]
    after = httpx.get(served.url + "/metrics").text

    def grew(status: int) -> float:
        name = f'rose_requests_total{{model="",route="/v1/embeddings",status="{status}"}}'
        return sample(after, name) - sample(before, name)

    assert grew(499) == 2 and grew(500) == 0


def test_a_drain_answers_a_slow_upload_503_at_once_and_still_finishes_real_work():
    """On SIGTERM (here: uvicorn's should_exit, the same drain) a body still arriving gets 503 at
    once, while a request that is computing gets its answer; the drain then ends at once, not
    after --shutdown-timeout."""
    fake = FakeEngine(delay=1.0)
    with serve_in_thread(fake_config(shutdown_timeout=20), fake) as served:
        upload = served.connect()
        upload.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000\r\n\r\n{\"input\": ")
        with ThreadPoolExecutor(1) as pool:
            computing = pool.submit(httpx.post, served.url + "/v1/embeddings",
                                    json={"model": FAKE_MODEL, "input": ["in flight"]}, timeout=30)
            time.sleep(0.3)  # its batch runs
            served.server.should_exit = True
            drain_started = time.monotonic()
            error, _ = _envelope(read_until_closed(upload), 503, "server_shutting_down")
            answered_after = time.monotonic() - drain_started
            assert computing.result().status_code == 200
        served.thread.join(30)
        stopped_after = time.monotonic() - drain_started
        upload.close()
    assert error["type"] == "server_error"
    assert answered_after < 1.0, answered_after
    assert stopped_after < 3.0, stopped_after  # the computing request's second, not the 20 s allowed


def test_the_flags_reach_the_config():
    from rose_embed.server.cli.main import build_parser, config_from_args

    def parse(*flags: str):
        return config_from_args(build_parser().parse_args(["serve", "--devices", "cpu", *flags]))

    default = parse()
    assert (default.max_header_bytes, default.header_timeout, default.max_connections) == (32768, 10.0, 1024)
    given = parse("--max-header-bytes", "65536", "--header-timeout", "2.5", "--max-connections", "10")
    assert (given.max_header_bytes, given.header_timeout, given.max_connections) == (65536, 2.5, 10)


@pytest.mark.parametrize("flag,value,says", [
    ("--max-header-bytes", "0", "must be"), ("--max-connections", "-1", "must be"),
    ("--header-timeout", "0", "must be a number of seconds above 0"),
])
def test_a_limit_below_one_is_refused(flag, value, says, capsys):
    from rose_embed.server.cli.main import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", flag, value])
    assert exit_info.value.code == 2
    assert f"argument {flag}: {says}" in capsys.readouterr().err


@pytest.mark.parametrize("soft,hard", [(512, None), (600, 600)], ids=["raised", "hard limit too low"])
def test_the_limit_of_open_files_makes_room_for_the_connection_cap(soft, hard):
    """A soft limit below what --max-connections needs is raised within the hard one; a hard limit
    too low for it is said in one warning."""
    import resource
    import subprocess
    import sys

    system_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = hard or system_hard
    if hard != resource.RLIM_INFINITY and hard < 1024 + 256 and soft != hard:
        pytest.skip(f"the hard limit of open files here ({hard}) is below what the test raises to")
    code = ("import resource; from rose_embed.server.processes.descriptor_limit import make_room_for_connections; "
            "make_room_for_connections(1024); print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    assert done.returncode == 0, done.stderr
    if soft < hard:
        assert int(done.stdout) == 1024 + 256 and done.stderr == ""
    else:
        assert int(done.stdout) == 600
        assert "room for about 344 connections, fewer than --max-connections 1024" in done.stderr
