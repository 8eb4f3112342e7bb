"""The supervisor's SIGTERM handler raises its stop at whatever line the main thread is on, in
library code too; the stop must reach the supervisor as itself, whatever that code catches."""

from __future__ import annotations

import enum

import pytest

from server.supervisor import _raise_terminated, _Terminated


def test_a_stop_inside_enum_machinery_is_not_turned_into_a_type_error():
    """A SIGTERM while `import uvicorn` imports ssl lands inside enum's building of ssl.Purpose,
    which turns any Exception from a member's value type into a TypeError: the server then
    printed a traceback instead of stopping cleanly."""

    class ValueTypeHitBySignal(int):
        def __new__(cls, *args):
            _raise_terminated()

    with pytest.raises(_Terminated):

        class Purpose(ValueTypeHitBySignal, enum.Enum):
            def __new__(cls, value):
                return int.__new__(cls, value)

            SERVER_AUTH = 1


def test_a_stop_passes_through_except_exception():
    with pytest.raises(_Terminated):
        try:
            _raise_terminated()
        except Exception:  # what library code does
            pytest.fail("the stop was caught as an ordinary error")
