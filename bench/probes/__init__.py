"""One-question probes: each measured one choice the code made, and its answer is written in the
report it produced and the page that cites it (bench/README.md lists them). Kept to rerun on a new
card or torch."""
