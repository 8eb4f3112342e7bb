"""Admission (server/links/admission.py): the queue's bound over every front end's slot, small requests past
it while bulk requests fill it, an oversize request only into an empty queue, the bound from speed."""

from __future__ import annotations

import pytest

from rose_embed.engine.contract.interface import QueueFullError
from rose_embed.server.links.admission import FALLBACK_QUEUED_TOKENS, SMALL_REQUEST_TOKENS, Admission
from rose_embed.server.links.admission_board import AdmissionBoard


def test_past_the_bound_a_bulk_request_is_refused_and_a_query_is_admitted():
    admission = Admission(AdmissionBoard.local(), 0, lambda: 0.0, max_queued_tokens=10_000)
    bulk = admission.admit(9_000)
    with pytest.raises(QueueFullError) as refused:
        admission.admit(2_000)
    assert 1 <= refused.value.retry_after <= 60
    query = admission.admit(10)  # a bulk request holds more than an even share
    assert admission.queued_tokens == 9_010 and admission.num_refused == 1
    admission.release(bulk)
    admission.release(query)
    assert admission.queued_tokens == 0
    admission.admit(2_000)


def test_an_oversize_request_gets_an_empty_queue_and_queries_still_get_in_beside_it():
    admission = Admission(AdmissionBoard.local(), 0, lambda: 0.0, max_queued_tokens=1_000)
    huge = admission.admit(50_000)  # past the whole bound: admitted into the empty queue
    queries = [admission.admit(SMALL_REQUEST_TOKENS) for _ in range(3)]  # twice the bound, the largest apart
    with pytest.raises(QueueFullError):
        admission.admit(SMALL_REQUEST_TOKENS)
    with pytest.raises(QueueFullError):
        admission.admit(SMALL_REQUEST_TOKENS + 1)  # not small: past the bound
    for ticket in (huge, *queries):
        admission.release(ticket)
    admission.admit(SMALL_REQUEST_TOKENS + 1)


def test_small_requests_alone_are_bounded_too():
    admission = Admission(AdmissionBoard.local(), 0, lambda: 0.0, max_queued_tokens=1_000)
    admitted = 0
    with pytest.raises(QueueFullError):
        for _ in range(1_000):
            admission.admit(100)
            admitted += 1
    assert admitted == 10  # no bulk request holds more than its share: the bound holds for them


def test_progress_and_the_real_size_replace_the_estimate():
    admission = Admission(AdmissionBoard.local(), 0, lambda: 0.0, max_queued_tokens=10_000)
    ticket = admission.admit(4_000)
    admission.settle(ticket, 3_000)
    admission.progress(ticket, 1_000)
    assert admission.queued_tokens == 2_000


def test_every_front_ends_slot_counts_and_the_bound_follows_the_engines_speed():
    board = AdmissionBoard.create(2)
    try:
        speed = [0.0]
        first = Admission(board, 0, lambda: speed[0], queue_seconds=10.0)
        second = Admission(AdmissionBoard.attach(board.name, 2), 1, lambda: speed[0], queue_seconds=10.0)
        assert first.bound == FALLBACK_QUEUED_TOKENS  # no speed measured yet
        speed[0] = 1_000.0
        assert first.bound == 10_000
        first.admit(8_000)
        with pytest.raises(QueueFullError):
            second.admit(3_000)  # the other front end's work counts
        assert second.queued_tokens == 8_000
    finally:
        board.close()
