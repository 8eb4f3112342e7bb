"""The contract between the two sides: what a front end and an engine process both import.

The data they exchange: the engine's frozen config (config.py), the packed batch (batch.py) and the
tokens it hides as attention keys (hidden_keys.py), the messages (messages.py), the shared-memory
arena that holds token ids and vectors (arena.py) and the board an engine reports on (board.py), and
the one interface through which the server reaches its engines (interface.py). Beside it, the
process plumbing every process of the server shares: shared-memory blocks (shared_blocks.py,
owner_lock.py), signals while a child starts (child_signals.py), ending with the parent
(parent_watch.py), the heap (memory.py) and the CPUs a process may use (cpu_quota.py).

Runs in every process: the supervisor, the front ends, the engine processes. ROSE imports only its
data (config, batch, hidden_keys, cpu_quota), none of its process plumbing
(tests/package/test_import_layers.py).
"""
