"""Keep the heap from growing without end under batches of ever-changing sizes, cheaply.

On the CPU path every batch allocates activations of a new size (tokens x hidden x 4
bytes). glibc serves them from the engine thread's heap arena, where freed chunks of one
size fragment the space for the next: a soak of 200,000 inputs grew the resident set by
38 % that way. The first remedy, pinning glibc's mmap threshold at 1 MiB so that every
large tensor got its own mapping, kept the resident set flat but made the engine 30-40 %
slower (fresh mappings fault in and zero every page of every activation, on every batch).

Now the heap keeps glibc's defaults, so that the pieces of a batch (the CPU runner cuts
batches into pieces of at most 2,048 tokens, engine/rose/runner.py) and the batches after it
reuse the same memory, and `malloc_trim(0)` hands the free pages inside the arenas back
to the system only when the resident set has grown by more than `max_growth` past its
level over the first batches served (their largest: by then the pieces' working set is
resident). Trimming after every batch held the soak within 5 % too, but
cost the HTTP path ~25 %: each trim makes the next batch fault its pages in again, and
the trim holds the arena locks the engine thread allocates under.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time
from typing import Callable

logger = logging.getLogger("rose_embed.memory")

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
# glibc's largest mmap threshold on 64-bit: below it, blocks come from the heap and are reused.
KEPT_BLOCK_BYTES = 32 << 20
# Free memory at the heap's top that glibc itself hands back past this (a HeapTrimmer trims sooner).
KEPT_TOP_BYTES = 64 << 20


def _load_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library is not glibc (musl, macOS)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def keep_freed_memory() -> bool:
    """Have glibc keep freed blocks of up to KEPT_BLOCK_BYTES for the next allocation instead of
    giving them back to the kernel; False where the C library is not glibc.

    A front end answers a large request with buffers of megabytes (the request's texts, vectors,
    encoded answers, the response body). By default glibc maps blocks that large afresh and
    unmaps them on free, and trims the heap's top as soon as a few megabytes there are free, so
    every such request faulted in and zeroed thousands of pages again. A HeapTrimmer, where the
    process runs one, still trims when the resident set grows."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, KEPT_BLOCK_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, KEPT_TOP_BYTES))


def resident_bytes(pid: int | str = "self") -> int | None:
    """A process's resident set size (this one's by default), or None where /proc is missing
    or the process is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class HeapTrimmer:
    """Call `maybe_trim()` after each batch. The first `baseline_batches` calls set the
    baseline (the largest resident set among them); later ones start a trim, on its own
    thread, when the resident set exceeds the baseline by more than `max_growth` and no
    trim ran in the last `min_interval` seconds. Past the baseline the resident set is read
    at most once per `check_interval` seconds: a front end calls this once per request, and
    reading /proc each time costs more than the request's own bookkeeping. `trim` stands in
    for malloc_trim in tests.

    With the engine in a process of its own (as the server runs every engine), that
    process runs one too: the activations live in its heap.
    """

    def __init__(self, max_growth: float = 0.04, min_interval: float = 0.5, baseline_batches: int = 16,
                 check_interval: float = 0.05, clock: Callable[[], float] = time.monotonic,
                 read_resident: Callable[[], int | None] = resident_bytes,
                 trim: Callable[[int], int] | None = None):
        self.max_growth, self.min_interval, self.check_interval = max_growth, min_interval, check_interval
        self._baseline_batches_left = baseline_batches
        self._clock, self._read_resident = clock, read_resident
        self._trim = trim or _load_malloc_trim()
        self.baseline: int | None = None
        self._last = float("-inf")  # when the last trim started
        self._last_check = float("-inf")  # when the resident set was last read past the baseline
        self._busy = threading.Lock()
        self.num_trims = 0
        if self._trim is None:
            logger.info("malloc_trim unavailable (not glibc); the heap is left as the C library keeps it")

    @property
    def available(self) -> bool:
        return self._trim is not None

    def maybe_trim(self, *_record: object) -> bool:
        """Start a trim if one is due and none is running; True if one was started."""
        if self._trim is None:
            return False
        now = self._clock()
        if self._baseline_batches_left == 0:
            if now - self._last_check < self.check_interval:
                return False
            self._last_check = now
        resident = self._read_resident()
        if resident is None:  # no /proc: fall back to trimming at most every min_interval
            resident, self.baseline, self._baseline_batches_left = 1, 0, 0
        if self._baseline_batches_left > 0:
            self._baseline_batches_left -= 1
            self.baseline = max(self.baseline or 0, resident)
            return False
        if (resident <= self.baseline * (1 + self.max_growth) or now - self._last < self.min_interval
                or not self._busy.acquire(blocking=False)):
            return False
        self._last = now
        threading.Thread(target=self._run, name="rose-heap-trim", daemon=True).start()
        return True

    def _run(self) -> None:
        try:
            self._trim(0)
            self.num_trims += 1
        finally:
            self._busy.release()
