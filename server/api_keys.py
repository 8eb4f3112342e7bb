"""Where API keys come from besides --api-key: the environment (read by the CLI, which must not
import the web framework to answer --help quickly)."""

from __future__ import annotations

import os

API_KEY_ENV = "ROSE_EMBED_API_KEY"


def keys_from_env(environ: dict[str, str] | None = None) -> list[str]:
    """ROSE_EMBED_API_KEY may hold one key or several separated by commas.

    Set but holding no key, it is refused (ValueError) rather than read as unset: it is most often
    a secret that did not reach the environment (`ROSE_EMBED_API_KEY=$KEY` with KEY unset), and
    the server would start open to anyone while its operator believes it checks keys."""
    value = (environ if environ is not None else os.environ).get(API_KEY_ENV)
    if value is None:
        return []
    keys = [k.strip() for k in value.split(",") if k.strip()]
    if not keys:
        raise ValueError(f"${API_KEY_ENV} is set but holds no key ({value!r}); unset it to serve without keys")
    return keys
