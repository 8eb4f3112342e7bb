"""Building the engine's C kernels (engine/rose/attention/native/) on the machine that runs them.

A kernel is compiled once per source, compiler and instruction set, by the C compiler that
inductor also uses (`CC`, else `cc`, `gcc`, `clang`), into a cache directory
(`ROSE_KERNEL_CACHE`, else `$XDG_CACHE_HOME/rose-embed/kernels`, else `~/.cache/...`), and
loaded with ctypes. The build is atomic (a temporary file renamed into place), so engines
starting side by side never load a half-written library. A machine without a compiler, or
one that refuses the flags, gets None and a reason: the caller runs its portable path.

The kernels use OpenMP and link the process's libgomp, the one torch already loaded, so their
threads are torch's threads rather than a second pool competing for the same cores.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "native"
BASE_FLAGS = ("-O3", "-fPIC", "-shared", "-fopenmp", "-fno-strict-aliasing")


@dataclass(frozen=True)
class NativeLibrary:
    library: ctypes.CDLL | None
    reason: str  # why there is no library (empty when there is one)


def cache_directory() -> Path:
    explicit = os.environ.get("ROSE_KERNEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rose-embed" / "kernels"


def find_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _compiler_identity(compiler: str) -> str:
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@cache
def load_kernel(source_name: str, isa_flags: tuple[str, ...]) -> NativeLibrary:
    """The compiled library of native/<source_name>, built with the instruction-set flags
    given (the caller has checked that this CPU runs them)."""
    compiler = find_compiler()
    if compiler is None:
        return NativeLibrary(None, "no C compiler found (set CC, or install gcc)")
    # The headers it may include count too: a changed header is a changed kernel.
    source = b"".join(path.read_bytes() for path in [SOURCES / source_name, *sorted(SOURCES.glob("*.h"))])
    flags = BASE_FLAGS + isa_flags
    key = hashlib.sha256(source + repr(flags).encode() + _compiler_identity(compiler).encode()).hexdigest()[:16]
    directory = cache_directory()
    target = directory / f"{Path(source_name).stem}-{key}.so"
    if not target.exists():
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=directory) as scratch:
                built = Path(scratch) / target.name
                result = subprocess.run([compiler, *flags, "-o", str(built), str(SOURCES / source_name)],
                                        capture_output=True, text=True, timeout=300)
                if result.returncode != 0:
                    first_error = (result.stderr.strip().splitlines() or ["(no message)"])[0]
                    return NativeLibrary(None, f"{Path(compiler).name} could not build {source_name}: {first_error}")
                os.replace(built, target)
        except (OSError, subprocess.SubprocessError) as error:
            return NativeLibrary(None, f"could not build {source_name} in {directory}: {error}")
    try:
        return NativeLibrary(ctypes.CDLL(str(target)), "")
    except OSError as error:
        return NativeLibrary(None, f"could not load {target}: {error}")
