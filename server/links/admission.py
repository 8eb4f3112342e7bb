"""Admission: whether a request joins the queue, decided by its front end before anything of it is tokenized.

The queue is bounded by default. Every front end writes what it has admitted and not yet seen
computed into its slot of one shared board (server/links/admission_board.py): the tokens waiting
anywhere (not yet tokenized, waiting in the front end for arena room, in an engine's queue, on
a device) are the sum of the slots, which /metrics shows as `rose_queue_tokens`. A request's
cost is known before it is tokenized (server/pipeline/request_cost.py: characters and token ids, each
input cut at the model's limit), and is replaced by its real token count once tokenized.

A request is admitted when the queue has room for it; a request too large for any room is
admitted only into an empty queue. Past the bound, a small request (at most
SMALL_REQUEST_TOKENS) is still admitted while a larger request holds more than an even share
of what waits, up to twice the bound (the largest request apart): bulk requests fill the queue,
so they are refused, and a search query is not. Everything else is refused at once (429 with Retry-After, the seconds the
engines need for what waits), never left to time out after minutes.

The bound is `--max-queued-tokens`, or by default what the engines compute in
`--max-queue-seconds` at their measured speed: a request admitted at the bound finishes in
about that time, well inside `--request-timeout`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rose_embed.engine.contract.interface import QueueFullError, retry_after_seconds
from rose_embed.server.links.admission_board import AdmissionBoard

# A request of at most this many tokens is admitted past the bound while bulk requests fill the queue.
SMALL_REQUEST_TOKENS = 512
# Past the bound, small requests are admitted up to this many times the bound.
SMALL_REQUEST_CEILING = 2.0
# The bound when the engines' speed is not known yet.
FALLBACK_QUEUED_TOKENS = 262_144


@dataclass(eq=False)
class Ticket:
    """One admitted request's share of the queue: its cost, and how much of it has been computed."""

    cost: float
    done: float = 0.0

    @property
    def outstanding(self) -> float:
        return max(0.0, self.cost - self.done)


class Admission:
    """One front end's admission, over the board every front end writes its slot of."""

    def __init__(self, board: AdmissionBoard, slot: int, speed: Callable[[], float],
                 max_queued_tokens: int | None = None, queue_seconds: float = 30.0):
        """`speed`: the engines' tokens per second, summed (0 while unknown). `max_queued_tokens`:
        a fixed bound (None: `queue_seconds` of work at `speed`)."""
        self.board, self.slot, self.speed = board, slot, speed
        self.max_queued_tokens, self.queue_seconds = max_queued_tokens, queue_seconds
        self._tickets: set[Ticket] = set()
        self.num_refused = 0
        self._publish()

    @property
    def bound(self) -> float:
        if self.max_queued_tokens is not None:
            return float(self.max_queued_tokens)
        speed = self.speed()
        return self.queue_seconds * speed if speed > 0 else float(FALLBACK_QUEUED_TOKENS)

    @property
    def queued_tokens(self) -> float:
        """Tokens admitted by every front end and not yet computed."""
        return self.board.totals()[0]

    def admit(self, cost: float) -> Ticket:
        """A ticket for a request of `cost` tokens, or QueueFullError (the caller answers 429)."""
        if not self._has_room(cost):
            self.num_refused += 1
            raise QueueFullError(self.retry_after())
        ticket = Ticket(float(cost))
        self._tickets.add(ticket)
        self._publish()
        return ticket

    def _has_room(self, cost: float) -> bool:
        waiting, num_requests, largest = self.board.totals()
        bound = self.bound
        if waiting <= 0 or waiting + cost <= bound:
            return True
        # The ceiling counts the largest request apart: one admitted into an empty queue may be past the bound.
        if cost > SMALL_REQUEST_TOKENS or waiting + cost > SMALL_REQUEST_CEILING * bound + largest:
            return False
        # A bulk request holds more than an even share, this one counted.
        return largest > (waiting + cost) / (num_requests + 1)

    def retry_after(self) -> int:
        return retry_after_seconds(self.queued_tokens, self.speed())

    def settle(self, ticket: Ticket, cost: float) -> None:
        """The request's real cost, now that it is tokenized."""
        ticket.cost = float(cost)
        self._publish()

    def progress(self, ticket: Ticket, num_tokens: int) -> None:
        """`num_tokens` of the request are computed."""
        ticket.done += num_tokens
        self._publish()

    def release(self, ticket: Ticket) -> None:
        """The request is over (answered, failed or gone): nothing of it waits any more."""
        self._tickets.discard(ticket)
        self._publish()

    def _publish(self) -> None:
        outstanding = [t.outstanding for t in self._tickets]
        self.board.write(self.slot, sum(outstanding), len(outstanding), max(outstanding, default=0.0))
