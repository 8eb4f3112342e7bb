"""The command line: `rose-embed serve` and `rose-embed embed`, their flags and their checks.
Runs in the command's own process, which becomes the supervisor (serve) or the corpus job (embed).
"""
