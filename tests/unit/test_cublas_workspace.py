"""The engine's own processes give cuBLAS no workspace, unless the environment says otherwise."""

from __future__ import annotations

import pytest

from rose_embed.engine.rose.cublas_workspace import NO_WORKSPACE, give_cublas_no_workspace


@pytest.fixture
def clean_env(monkeypatch):
    for name in NO_WORKSPACE:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_no_workspace_where_the_environment_sets_none(clean_env):
    import os

    give_cublas_no_workspace()
    assert {name: os.environ[name] for name in NO_WORKSPACE} == NO_WORKSPACE


@pytest.mark.parametrize("name", sorted(NO_WORKSPACE))
def test_a_limit_the_user_set_is_kept_and_the_other_left_alone(clean_env, name):
    import os

    clean_env.setenv(name, "4096")
    give_cublas_no_workspace()
    assert os.environ[name] == "4096"
    assert all(other not in os.environ for other in NO_WORKSPACE if other != name)
