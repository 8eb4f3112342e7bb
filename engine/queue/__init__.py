"""Tulip: one queue per device, over every front end's pieces, cut into batches by token volume.

Runs in the engine process of its device (engine_process.py is that process's main function), or
in a thread of a front end that serves an `Engine` object itself (server/processes/in_process_engine.py).
"""
