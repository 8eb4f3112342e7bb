"""The supervisor and the processes it starts: engine processes (one per device), the part
processes, K front ends; the machine's shape (topology.py), listening sockets, signals and what a
dead server left behind. Runs in the supervisor, and as each front end's main (front_end.py).
"""
