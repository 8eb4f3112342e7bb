"""The wheel installs one import name, rose_embed, with every module and data file of the
folders it maps (pyproject.toml's package-dir), and runs from a fresh environment."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # builds and installs a wheel (about 20 s)

FOLDERS = {"server": "rose_embed/server", "engine": "rose_embed/engine", "compat": "rose_embed/compat",
           "corpus": "rose_embed/corpus", "rose_embed": "rose_embed"}
DATA_SUFFIXES = {".c", ".h", ".jsonl"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy of what the wheel is made of, so that the build leaves nothing in the checkout."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in FOLDERS:
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(out), str(source)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("rose_embed-*.whl")
    return built


def test_the_wheel_holds_one_top_level_name_and_every_file(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"rose_embed", wheel.name.split("-py")[0] + ".dist-info"}
    expected = {f"{FOLDERS[folder]}/{path.relative_to(REPO / folder).as_posix()}"
                for folder in FOLDERS for path in (REPO / folder).rglob("*")
                if path.suffix == ".py" or path.suffix in DATA_SUFFIXES}
    assert expected - set(names) == set()


def test_the_installed_wheel_runs_from_a_fresh_environment(wheel, tmp_path):
    """Installed with no dependencies into a new venv; the dependencies come from this one's
    site-packages, on PYTHONPATH (which reads no .pth file, so the checkout's editable install stays out)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    env = {"PATH": f"{tmp_path / 'venv' / 'bin'}:/usr/bin:/bin", "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    for command in ([str(python), "-m", "rose_embed", "--version"], ["rose-embed", "--version"]):
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.startswith("rose-embed 0.1.0"), done.stdout + done.stderr
    where = subprocess.run([str(python), "-c", "import rose_embed.server, rose_embed.engine.rose as r; "
                            "print(rose_embed.server.__file__, r.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert all(path.startswith(str(tmp_path / "venv")) for path in where.stdout.split()), where.stdout


def test_a_checkout_runs_uninstalled(tmp_path):
    """As on the GPU machine (docs/gpu-runs.md): nothing installed, the checkout's root on the path,
    and rose_embed reaches the top-level folders from there (rose_embed/__init__.py)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    done = subprocess.run([str(python), "-m", "rose_embed", "--version"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("rose-embed "), done.stdout + done.stderr
    where = subprocess.run([str(python), "-c", "import rose_embed.engine.rose.engine as e; print(e.__file__)"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0 and where.stdout.strip() == str(REPO / "engine" / "rose" / "engine.py"), where.stderr
