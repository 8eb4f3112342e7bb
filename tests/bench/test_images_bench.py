"""bench/images.py on the CPU at a tiny shape: a report with a row per dtype, positive rates and ratios, and
every arm's check against transformers passed."""

from __future__ import annotations

import pickle

import pytest

from bench import images
from bench.lib.image_http import Repeated
from bench.lib.server_cpu import ROLES, ServerCpu


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


@pytest.mark.slow
def test_http_smoke_run_reports_the_server_against_the_engine(tmp_path):
    """The HTTP arm at a tiny shape: the real server, 2 clients in 1 process sending JPEG and PNG images; every
    answer checked against the engine's, both tables written, the CPU read."""
    out = tmp_path / "images-http.md"
    status = images.main(["--device", "cpu", "--shapes", "none", "--http", "tiny", "--http-images", "48",
                          "--http-size", "320x240", "--http-distinct", "4", "--http-formats", "jpeg,png",
                          "--http-clients", "2", "--http-procs", "1", "--http-rounds", "1", "--out", str(out)])
    report = out.read_text()
    assert status == 0
    assert report.startswith("# Images: CLIP's vision tower, over HTTP against the engine alone")
    assert "jpeg files of" in report and "png files of" in report
    lines = report.splitlines()
    speed = _table_row(lines, "| shape | dtype | images a round |")
    assert speed[0] == "tiny" and speed[2] == "48"
    assert float(speed[4].replace(",", "")) > 0 and float(speed[5].replace(",", "")) > 0
    assert "FAILED" not in speed[8] and speed[9] == "48" and speed[10].startswith("0 (") and speed[11] == "0"
    cpu = _table_row(lines, "| shape | front ends |")
    assert cpu[0] == "tiny" and cpu[1] == "1"
    assert float(cpu[2]) > 0 and float(cpu[3]) > 0  # the front end's decoding read (at 10 ms a clock tick)
    assert "--devices cpu --model " in report


def _table_row(lines: list[str], head: str) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    return [cell.strip() for cell in lines[start + 2].strip("|").split("|")]


def test_a_round_of_repeated_images_slices_as_a_list_and_pickles_small():
    items = Repeated(("a", "b", "c"), 8)
    assert len(items) == 8 and list(items) == ["a", "b", "c", "a", "b", "c", "a", "b"]
    assert items[2:7] == ["c", "a", "b", "c", "a"] and items[7] == "b" and items[6:20] == ["a", "b"]
    assert items[-1] == "b" and items[-8] == "a"
    with pytest.raises(IndexError):
        items[8]
    assert len(pickle.dumps(Repeated(("x" * 1000,), 10_000))) < 2000


def test_server_cpu_reads_the_samples_that_bracket_a_window():
    """Cores by role between the last sample at or before the window opens and the first at or after it closes."""
    sampler = object.__new__(ServerCpu)
    sampler.samples = [(float(at), {role: at * weight for role in ROLES})
                       for at, weight in [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]]
    # from (1, 1 s) to (3, 9 s): 8 CPU seconds over 2 wall seconds
    assert sampler.cores(1.5, 2.5) == dict.fromkeys(ROLES, 4.0)
    assert sampler.cores(1.0, 3.0) == dict.fromkeys(ROLES, 4.0)
    assert sampler.cores(-1.0, 9.0) == dict.fromkeys(ROLES, 4.0)  # beyond the samples: the first and the last
    assert sampler.cores(5.0, 6.0) == dict.fromkeys(ROLES, 0.0)  # no two samples around it
