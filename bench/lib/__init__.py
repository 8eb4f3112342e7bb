"""Helpers the benchmarks share: the workload, a server process, the load generator's clients and
patterns, py-spy summaries, the CPU peers' runner. Each runs in the benchmark's process (or one it
starts); none measures anything on its own."""
