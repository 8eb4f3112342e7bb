"""The progress bar: texts done out of the total, texts/s and time left, on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm


def progress_bar(count_total: Callable[[], int], resumed: int, quiet: bool, stream: TextIO | None = None) -> tqdm:
    """A bar that starts at `resumed` (rows finished by an earlier run, not counted in the rate).

    It draws only on a terminal: redirected to a file or a CI log, a redrawn bar is noise.
    `count_total` (a pass over a JSONL file) is called only when the bar is drawn.
    """
    stream = stream if stream is not None else sys.stderr
    shown = not quiet and getattr(stream, "isatty", lambda: False)()
    return tqdm(total=count_total() if shown else None, initial=resumed, unit=" texts", file=stream,
                disable=not shown, dynamic_ncols=True, smoothing=0.1, mininterval=0.5)
