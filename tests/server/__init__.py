"""Real server processes: the supervisor, front ends and engine processes, signals, faults, restarts
(slow tier)."""
