"""Where API keys come from besides --api-key: the environment and a keys file (read by the CLI,
which must not import the web framework to answer --help quickly)."""

from __future__ import annotations

import os

API_KEY_ENV = "ROSE_EMBED_API_KEY"


def keys_from_file(path: str) -> list[tuple[str, float]]:
    """`--api-keys-file`: one key a line, optionally followed by whitespace and its weight (a positive
    number, 1 by default: its requests' share of each batch against other requests'); blank lines and
    lines starting with # are skipped. ValueError names the line that is wrong."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    keys = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 2:
            raise ValueError(f"{path} line {number}: expected a key and at most a weight, got {len(fields)} fields")
        weight = 1.0
        if len(fields) == 2:
            try:
                weight = float(fields[1])
            except ValueError:
                weight = float("nan")
            if not 0 < weight < float("inf"):
                raise ValueError(f"{path} line {number}: the weight must be a positive number, got {fields[1]!r}")
        keys.append((fields[0], weight))
    if not keys:
        raise ValueError(f"{path} holds no key; leave the flag out to serve without keys")
    return keys


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
