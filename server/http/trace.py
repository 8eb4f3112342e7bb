"""Per-request trace: an id and the timings of its phases, for headers, metrics and the log.

The HTTP middleware makes one per request; the route fills in sizes and tokenization time,
and the request pipeline when the request's pieces ran (as the engines report them).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field

# An incoming x-request-id is echoed only when it is short and plain, so that a log line or a
# header never carries whatever a client chose to put there.
_SAFE_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
SCOPE_KEY = "rose.trace"


def request_id_from(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name.lower() == b"x-request-id":
            text = value.decode("latin-1")
            if _SAFE_ID.fullmatch(text):
                return text
    return uuid.uuid4().hex


@dataclass(eq=False)
class RequestTrace:
    request_id: str
    started: float = field(default_factory=time.perf_counter)
    # time.monotonic() from here on, as the engines report when a piece ran
    arrived: float = field(default_factory=time.monotonic)
    submitted: float | None = None  # the first piece handed to the engines
    first_batch_started: float | None = None
    last_batch_finished: float | None = None
    responded: float | None = None  # the response's headers sent
    tokenization_seconds: float | None = None
    num_inputs: int | None = None
    num_tokens: int | None = None
    # The served id of the model that computes the request, once a route has picked it; "" before
    # (and for requests that never pick one): /metrics counts each request under this label.
    model: str = ""
    texts: list[str] | None = None  # kept only with --log-inputs

    def add_batch(self, started: float, finished: float) -> None:
        if self.first_batch_started is None or started < self.first_batch_started:
            self.first_batch_started = started
        if self.last_batch_finished is None or finished > self.last_batch_finished:
            self.last_batch_finished = finished

    @property
    def queue_seconds(self) -> float | None:
        """From submission to the engine picking up the first of the request's inputs."""
        if self.submitted is None or self.first_batch_started is None:
            return None
        return max(0.0, self.first_batch_started - self.submitted)

    @property
    def inference_seconds(self) -> float | None:
        """From the first of its batches starting to the last one's vectors on the host."""
        if self.first_batch_started is None or self.last_batch_finished is None:
            return None
        return self.last_batch_finished - self.first_batch_started

    @property
    def preparation_seconds(self) -> float | None:
        """From the request's arrival to its first piece handed to the engines: reading and
        checking the body, and making its first part ready."""
        return None if self.submitted is None else self.submitted - self.arrived

    @property
    def answer_seconds(self) -> float | None:
        """From its last vectors on the host to the response's headers: encoding the vectors that
        came last and building the response."""
        if self.last_batch_finished is None or self.responded is None:
            return None
        return max(0.0, self.responded - self.last_batch_finished)

    def phases(self) -> dict[str, float]:
        """The measured phases in seconds (total is measured by the caller). Preparation, queue,
        inference and answer follow one another; tokenization overlaps them (a large request's
        later parts are tokenized while earlier ones compute)."""
        out = {"preparation": self.preparation_seconds, "queue": self.queue_seconds,
               "tokenization": self.tokenization_seconds, "inference": self.inference_seconds,
               "answer": self.answer_seconds}
        return {k: v for k, v in out.items() if v is not None}
