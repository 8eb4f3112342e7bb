"""Where API keys come from besides --api-key: the environment (read by the CLI, which must not
import the web framework to answer --help quickly)."""

from __future__ import annotations

import os

API_KEY_ENV = "ROSE_EMBED_API_KEY"


def keys_from_env(environ: dict[str, str] | None = None) -> list[str]:
    """ROSE_EMBED_API_KEY may hold one key or several separated by commas."""
    value = (environ if environ is not None else os.environ).get(API_KEY_ENV, "")
    return [k.strip() for k in value.split(",") if k.strip()]
