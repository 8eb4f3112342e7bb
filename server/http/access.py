"""Who may call a route where the server has API keys, as each route declares it.

"key": a client with a key; "open": anyone (a readiness probe cannot send one); "metrics" and
"docs": anyone, unless --protect-metrics-and-docs. A handler carries its access in its `opt`,
where the API-key guard (server/http/auth.py) reads it.
"""

from __future__ import annotations

from typing import Literal

Access = Literal["key", "open", "metrics", "docs"]
ACCESS_KEY = "access"


def access_opt(access: Access) -> dict[str, Access]:
    """A handler's or router's `opt` that declares its access."""
    return {ACCESS_KEY: access}
