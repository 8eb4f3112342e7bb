"""Engine plugins: `--engine-plugin module:function` calls function(engine) once it is loaded.

They exist for fault injection in tests (tests/support/fault_plugins.py wraps `execute_packed`),
so that the hot path holds no test-only branches. The flag is hidden from --help.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rose_embed.engine.rose.engine import Engine


def load_engine_plugin(spec: str) -> Callable[[Engine], None]:
    module_name, _, function_name = spec.partition(":")
    return getattr(importlib.import_module(module_name), function_name or "install")
