"""Optional dependencies of corpus jobs (the `corpus` extra), checked before any work starts."""

from __future__ import annotations

import importlib.util


class MissingDependencyError(RuntimeError):
    """A package the job will need is not installed; the message says what to install."""


def require(package: str, purpose: str) -> None:
    """Raise MissingDependencyError unless `package` can be imported (nothing is imported here)."""
    if importlib.util.find_spec(package) is None:
        raise MissingDependencyError(f"{purpose} needs {package}, which is not installed: pip install {package} "
                                     "(or the corpus extra: pip install -e '.[corpus]' in a clone of rose-embed)")
