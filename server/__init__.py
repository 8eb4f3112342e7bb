"""Ivy and the supervisor: every process of `rose-embed serve` but the engine processes.

Grouped by role: cli/ (the command, before anything starts), processes/ (the supervisor, the
processes it starts and their shape), and the front end's parts: routes/ (one file per API),
pipeline/ (validate, template, tokenize, split, encode), links/ (the engines, reached through
engine/contract/ alone), http/ (auth, errors, middleware, OpenAPI, logs) and metrics/. app.py
builds the Litestar app, config.py holds the frozen server config, runtime.py the front end's
long-lived parts. cli/ runs in the command's process, processes/ in the supervisor (and front_end.py
as each front end's main); the rest runs in the front ends.
"""
