"""Keep glibc's heap from growing without end under batches of ever-changing sizes.

glibc serves an allocation above its mmap threshold with its own mapping, returned to the
system on free. But the threshold is dynamic: each freed mapping raises it (up to 32 MiB),
after which the CPU path's activation tensors (tokens x hidden x 4 bytes, a different size
for every batch) come from the heap arenas of the engine thread, fragment them and are
never given back: a soak of 200,000 inputs grew the resident set by 38 % that way. Setting
the thresholds explicitly switches the dynamic adjustment off (mallopt(3)).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger("rose_embed.memory")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 20  # 1 MiB: large tensors get their own mapping; small objects stay in the heap


def pin_malloc_thresholds() -> bool:
    """Fix glibc's mmap and trim thresholds; False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _THRESHOLD))
    if not ok:
        logger.warning("mallopt refused the thresholds; resident memory may grow under varied batch sizes")
    return ok
