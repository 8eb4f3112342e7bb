"""Tests of bench/: its layout, its reports' index, and the benchmarks' own logic."""
