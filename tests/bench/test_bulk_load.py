"""The load generator's bulk pattern (bench/lib/bulk.py): its response sample, and a brief run against
a real server on the CPU whose report must hold sane figures."""

from __future__ import annotations

import pytest

from bench import load_gen
from bench.lib.bulk import EvenSample, encode_blocks


def test_the_sample_stays_small_and_spreads_over_the_whole_run():
    sample = EvenSample(cap=4)
    for i in range(1000):
        sample.offer(i)
    assert 4 <= len(sample.kept) < 8
    assert sample.kept[0] == 0 and sample.kept[-1] >= 500
    gaps = {b - a for a, b in zip(sample.kept, sample.kept[1:])}
    assert gaps == {sample.stride}


def test_blocks_are_consecutive_texts_and_a_partial_last_block_is_dropped():
    import msgspec

    bodies = encode_blocks([f"t{i}" for i in range(25)], 10, None)
    assert [msgspec.json.decode(b)["input"] for b in bodies] == [[f"t{i}" for i in range(10)],
                                                                  [f"t{i}" for i in range(10, 20)]]
    assert all(msgspec.json.decode(b)["encoding_format"] == "base64" for b in bodies)


def _table_rows(report: str, request_texts: int) -> list[list[str]]:
    return [[cell.strip(" *") for cell in line.strip("|").split("|")]
            for line in report.splitlines() if line.startswith(f"| {request_texts} |")]


@pytest.mark.slow
def test_bulk_pattern_against_a_real_server_on_the_cpu(tmp_path):
    out = tmp_path / "bulk.md"
    rc = load_gen.main(["--pattern", "bulk", "--device", "cpu", "--num-texts", "60", "--request-texts", "10",
                        "--bulk-clients", "1,2", "--window", "3", "--warmup", "0.5", "--rounds", "1",
                        "--out", str(out)])
    report = out.read_text()
    assert rc == 0, report
    rows = [row for row in _table_rows(report, 10) if len(row) == 10]
    assert [row[1] for row in rows] == ["1", "2"], report
    phase_rows = [row for row in _table_rows(report, 10) if len(row) == 8]
    assert [row[1] for row in phase_rows] == ["1", "2"], report
    for _, _, preparation, queue, inference, answer, tokenization, total in phase_rows:
        in_turn = sum(float(x) for x in (preparation, queue, inference, answer))
        assert float(inference) > 0 and float(tokenization) > 0, report
        # The phases follow one another within the total; each figure is a median over the
        # requests, and medians of the parts need not add up to the median of the whole.
        assert in_turn <= 1.05 * float(total) + 0.5, report
    for _, _, tokens_per_s, ratio, step, counted, p50_ms, one_request_ms, failed, cpu_share in rows:
        assert float(tokens_per_s.replace(",", "")) > 0, report
        assert float(ratio.rstrip("x")) > 0, report
        assert int(counted) >= 1, report
        assert 0 < float(step) <= float(ratio.rstrip("x")) + 0.01, report  # one request's share of the ratio
        assert float(p50_ms) > 0 and float(one_request_ms) > 0, report
        assert failed == "0 (0)", report
        assert 0 <= float(cpu_share.rstrip("%")) < 100, report
    assert "**0 mismatches**" in report and "no failed requests" in report
    assert "one per client in every measurement: yes" in report
