"""bench/heads.py on the CPU at a tiny shape: a report with a row per head, positive rates and ratios,
every head's check passed; and a wrong answer stops the run."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from bench import heads
from bench.lib import head_checks


def _table(report: str, first_column: str) -> list[list[str]]:
    """The rows of the markdown table whose header starts with `first_column`, split into cells."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


@pytest.mark.slow
def test_smoke_run_reports_every_head_checked(tmp_path):
    out = tmp_path / "heads.md"
    status = heads.main(["--shape", "tiny", "--device", "cpu", "--dtype", "float32", "--docs", "6", "--repeats", "1",
                         "--min-seconds", "0", "--check-texts", "3", "--out", str(out)])
    report = out.read_text()
    assert status == 0
    assert report.startswith("# Heads") and "- command: `python3 bench/heads.py --shape tiny" in report
    assert "- commit " in report and "- machine: " in report
    speed = {row[0]: row for row in _table(report, "head | engine's head")}
    assert list(speed) == list(heads.HEADS)
    assert [speed[h][1] for h in heads.HEADS] == ["SentenceHead", "SparseHead", "LabelHead"]
    for row in speed.values():
        assert float(row[3].replace(",", "")) > 0 and float(row[4]) > 0  # tok/s, ratio to dense
    assert float(speed["dense"][4]) == 1.0 and speed["sparse"][5].startswith(">= 0.80")
    assert all(row[-1] == "passed" for row in _table(report, "head | texts"))
    formats = {(row[0], row[1]) for row in _table(report, "head | format")}
    assert {("sparse", "device->host"), ("sparse", "JSON pairs (TEI)"), ("dense", "JSON base64")} <= formats
    assert int(re.search(r"non-zero values per text: mean [\d.]+, largest (\d+)", report)[1]) > 0


def test_an_answer_off_its_reference_is_refused(monkeypatch):
    want = np.array([[0.0, 1.0, 2.0]])
    monkeypatch.setattr(head_checks, "_reference", lambda *args: want)
    assert head_checks.check_head("sparse", "-", ["a"], want + 1e-4, "cpu", torch.float32).error < 1e-3
    with pytest.raises(head_checks.HeadMismatch, match="sparse"):
        head_checks.check_head("sparse", "-", ["a"], want + 0.1, "cpu", torch.float32)
    with pytest.raises(head_checks.HeadMismatch, match="all zero"):
        monkeypatch.setattr(head_checks, "_reference", lambda *args: 0 * want)
        head_checks.check_head("sparse", "-", ["a"], 0 * want, "cpu", torch.float32)
