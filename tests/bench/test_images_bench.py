"""bench/images.py on the CPU at a tiny shape: a report with a row per dtype, positive rates and ratios, and
every arm's check against transformers passed."""

from __future__ import annotations

import pytest

from bench import images


@pytest.mark.slow
def test_smoke_run_reports_each_dtype_checked(tmp_path):
    out = tmp_path / "images.md"
    status = images.main(["--device", "cpu", "--shapes", "tiny", "--dtypes", "bfloat16,float32", "--images", "6",
                          "--batch", "4", "--repeats", "1", "--min-seconds", "0", "--check-images", "2",
                          "--out", str(out)])
    report = out.read_text()
    assert status == 0
    assert report.startswith("# Images") and "- command: `python3 bench/images.py --device cpu" in report
    assert "- commit " in report and "- machine: " in report
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| shape |"))
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[start + 2: start + 4]]
    assert [row[3] for row in rows] == ["bfloat16", "float32"]
    for row in rows:
        assert row[0] == "tiny" and row[1] == "17" and row[2] == "4"
        assert float(row[4].replace(",", "")) > 0 and float(row[5].replace(",", "")) > 0 and float(row[6]) > 0
        assert "FAILED" not in row[7]
