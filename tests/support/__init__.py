"""Shared helpers of the tests: fake engines, checkpoints, references, plugins for fault injection.
Fixtures are in tests/conftest.py."""
