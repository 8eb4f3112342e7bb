"""Metrics and health: Prometheus series per front end, the stats board that joins the front ends'
figures, and /health and /metrics for the whole server. Runs in the front ends (the supervisor
makes the board).
"""
