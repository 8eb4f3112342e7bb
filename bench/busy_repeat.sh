#!/usr/bin/env bash
# Run a pytest selection N times while two busy loops hold both cores; print each run's tally.
#   bash bench/busy_repeat.sh 10 tests/test_front_ends.py -k killed
set -u
runs=$1; shift
python3 -c "while True: pass" & b1=$!
python3 -c "while True: pass" & b2=$!
trap 'kill $b1 $b2 2>/dev/null' EXIT
passed=0
for i in $(seq 1 "$runs"); do
  if out=$(timeout 600 python -m pytest -q -p no:cacheprovider "$@" 2>&1); then passed=$((passed + 1)); fi
  echo "run $i: $(echo "$out" | tail -1)"
done
echo "runs passed: $passed of $runs"
