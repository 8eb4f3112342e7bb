"""bench/heads.py on the CPU at a tiny shape: a report with a row per arm, positive rates and ratios to
each arm's own baseline, every head's check passed, bytes per answer per format, and the HTTP arm's ratio
with every answer checked; a wrong answer stops the run; the HTTP arm's comparison of an answer with the
engine's tells a changed one."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from bench import heads
from bench.lib import head_checks, head_http


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
def test_smoke_run_reports_every_head_checked_and_over_http(tmp_path):
    out = tmp_path / "heads.md"
    status = heads.main(["--shape", "tiny", "--device", "cpu", "--dtype", "float32", "--docs", "6", "--repeats", "1",
                         "--min-seconds", "0", "--check-texts", "3", "--bytes-texts", "4", "--http", "sparse,colbert",
                         "--http-texts", "24", "--http-repeat", "1", "--http-clients", "2", "--http-procs", "1",
                         "--http-rounds", "1", "--out", str(out)])
    report = out.read_text()
    assert status == 0
    assert report.startswith("# Heads") and "- command: `python3 bench/heads.py --shape tiny" in report
    assert "- commit " in report and "- machine: " in report
    speed = {row[0]: row for row in _table(report, "arm | engine's head")}
    assert list(speed) == [arm.name for arm in heads.ARMS]
    assert [speed[a.name][1] for a in heads.ARMS] == ["SentenceHead", "SparseHead", "LabelHead", "MaxSimHead",
                                                      "M3Head", "M3Head"]
    for arm in heads.ARMS:
        row = speed[arm.name]
        assert float(row[3].replace(",", "")) > 0 and float(row[5]) > 0  # tok/s, ratio to its baseline
        assert row[4] == (arm.baseline or arm.name)
        assert row[6] == "-" if arm.target is None else row[6].startswith(f">= {arm.target:.2f} ")
    assert float(speed["dense"][5]) == 1.0 and float(speed["bge-m3 dense"][5]) == 1.0
    # a row per text, against a row per kept token (colbert) and per token (bge-m3 all: every document's)
    assert speed["dense"][7] == speed["bge-m3 dense"][7] == "6"
    assert int(speed["colbert"][7].replace(",", "")) > 6 * 8 and int(speed["bge-m3 all"][7].replace(",", "")) > 6 * 8
    checks = {row[0]: row for row in _table(report, "check | texts")}
    assert set(checks) == {"dense", "sparse", "classifier", "colbert documents", "colbert queries", "bge-m3 dense",
                           "bge-m3 sparse", "bge-m3 colbert"}
    assert all(row[-1] == "passed" for row in checks.values())
    sizes = {(row[0], row[1]): float(row[2].replace(",", "")) for row in _table(report, "arm | format")}
    for arm, name in [("sparse", "JSON pairs (TEI)"), ("dense", "JSON base64"), ("colbert", "JSON float"),
                      ("colbert", "query: JSON base64"), ("bge-m3 all", "JSON base64"), ("bge-m3 dense", "JSON float")]:
        assert sizes[(arm, name)] > 0
    # a document's token vectors outweigh its one dense vector; base64 is the lighter wire
    assert sizes[("colbert", "JSON float")] > sizes[("colbert", "JSON base64")] > sizes[("dense", "JSON base64")]
    assert sizes[("bge-m3 all", "device->host")] > sizes[("bge-m3 dense", "device->host")]
    assert int(re.search(r"non-zero values per text: mean [\d.]+, largest (\d+)", report)[1]) > 0
    http = {row[0]: row for row in _table(report, "head | route")}
    assert list(http) == ["sparse", "colbert"] and http["sparse"][1] == "/embed_sparse"
    for row in http.values():
        assert float(row[7].split()[0]) > 0 and row[9].startswith(">= 0.90 ")  # HTTP / engine, the target
        assert int(row[10].replace(",", "")) == int(row[2].replace(",", ""))  # every text's answer checked
        assert float(row[11]) >= 0.9999 and row[12] == "0"


def test_an_answer_off_its_reference_is_refused(monkeypatch):
    want = np.array([[0.0, 1.0, 2.0]])
    monkeypatch.setattr(head_checks, "_reference", lambda *args: want)
    assert head_checks.check_head("sparse", "-", ["a"], want + 1e-4, "cpu", torch.float32).error < 1e-3
    with pytest.raises(head_checks.HeadMismatch, match="sparse"):
        head_checks.check_head("sparse", "-", ["a"], want + 0.1, "cpu", torch.float32)
    with pytest.raises(head_checks.HeadMismatch, match="all zero"):
        monkeypatch.setattr(head_checks, "_reference", lambda *args: 0 * want)
        head_checks.check_head("sparse", "-", ["a"], 0 * want, "cpu", torch.float32)


def test_the_http_arm_tells_a_changed_answer():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((5, 4)).astype(np.float32)
    pairs = (np.array([3, 9, 40]), np.array([0.5, 0.25, 1.0], np.float32))
    assert head_http.answer_cosine("colbert", vectors, vectors) == pytest.approx(1.0)
    assert head_http.answer_cosine("colbert", vectors[:4], vectors) == -1.0  # a vector missing
    changed = vectors.copy()
    changed[2] = -changed[2]
    assert head_http.answer_cosine("colbert", changed, vectors) < 0
    assert head_http.answer_cosine("sparse", pairs, pairs) == pytest.approx(1.0)
    moved = (np.array([3, 9, 41]), pairs[1])  # one weight on another token
    assert head_http.answer_cosine("sparse", moved, pairs) < 0.5
    m3 = (vectors[0], pairs, vectors[1:])
    assert head_http.answer_cosine("bge-m3", m3, m3) == pytest.approx(1.0)
    assert head_http.answer_cosine("bge-m3", (vectors[1], pairs, vectors[1:]), m3) < 0.999
