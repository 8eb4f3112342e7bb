"""The SM clock and power of each phase of a gpu_bench run (`gpu_session.sh clocks`).

Each line gpu_bench printed closes a phase that began at the line before it; this prints,
for each phase, the samples nvidia-smi took inside it while the GPU was not idle: the SM
clock's median and minimum, the power's median and maximum, and every throttle reason raised.

    python3 bench/clock_phases.py clocks.csv gpu-clocks.log
"""

from __future__ import annotations

import csv
import datetime as dt
import statistics
import sys


def _samples(path: str) -> list[tuple[dt.time, float, float, str]]:
    rows = []
    with open(path) as f:
        for row in csv.reader(f):
            if not row or row[0].startswith("timestamp"):
                continue
            stamp, clock, power, _temperature, reasons = (cell.strip() for cell in row[:5])
            moment = dt.datetime.strptime(stamp.split()[-1], "%H:%M:%S.%f").time()
            rows.append((moment, float(clock.split()[0]), float(power.split()[0]), reasons))
    return rows


def _phases(path: str) -> list[tuple[dt.time, str]]:
    phases = []
    with open(path) as f:
        for line in f:
            stamp, _, text = line.rstrip("\n").partition(" ")
            hours, minutes, seconds = stamp.split(":")
            whole, _, fraction = seconds.partition(".")
            phases.append((dt.time(int(hours), int(minutes), int(whole), int(fraction[:6] or 0)), text))
    return phases


def main() -> None:
    samples, phases = _samples(sys.argv[1]), _phases(sys.argv[2])
    print("| phase ending with | samples | SM MHz median | min | W median | max | throttle reasons |")
    print("|---|---|---|---|---|---|---|")
    start = samples[0][0] if samples else dt.time()
    for end, text in phases:
        # Samples with the idle reason alone (0x1) are the GPU waiting on the host: left out.
        inside = [s for s in samples if start <= s[0] < end and int(s[3], 16) != 1]
        start = end
        if not inside:
            continue
        clocks, powers = [s[1] for s in inside], [s[2] for s in inside]
        reasons = sorted({s[3] for s in inside})
        print(f"| {text.strip()[:70]} | {len(inside)} | {statistics.median(clocks):.0f} | {min(clocks):.0f} | "
              f"{statistics.median(powers):.0f} | {max(powers):.0f} | {' '.join(reasons)} |")


if __name__ == "__main__":
    main()
