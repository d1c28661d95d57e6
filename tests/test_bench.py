"""The benchmark suite and its records: the program's bad-input paths on this machine, and the
records of `make bench` well-formed, complete, current and saying what the pages say."""
import json
import warnings

import pytest

from guide import bench as report
from tests.helpers import python

GROUPS = {"training", "sliding", "documents", "decoding", "gqa", "decoding_settings", "forward_settings"}


def test_without_a_gpu_the_program_says_so():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: `make bench` runs the suite")
    result = python("-m snippets.bench --quick")
    assert result.returncode == 2 and result.stderr.startswith("error: no CUDA GPU. Fix:")
    assert result.stderr.count("\n") == 1


def test_unknown_option_is_one_line():
    result = python("-m snippets.bench --frobnicate")
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_document_lengths_fill_the_batch_exactly():
    from snippets import bench

    lengths = bench.document_lengths()
    assert sum(lengths) == bench.TOKENS and min(lengths) > 0 and max(lengths) <= 8192
    assert bench.document_lengths() == lengths, "the same documents in every run"


# Each check of a benchmark record runs once per GPU record, with the record's name as its
# parameter: its outcome is a verdict for that GPU (guide.claims.outcomes), wherever it ran.
GPUS = sorted(report.load_all())


@pytest.fixture(params=GPUS)
def records(request):
    """One GPU's benchmark record, as {name: record}."""
    return {request.param: report.load_all()[request.param]}


def test_there_are_benchmark_records():
    assert GPUS, "no benchmark record: run `make bench` on a CUDA machine"


def test_records_are_complete_current_and_checked(records, records_in_use):
    for name, record in records.items():
        assert record.get("complete") and not record["quick"], name
        if not report.current(record):  # the performance page says so above its tables
            warnings.warn(f"{name}: snippets/bench.py changed since this record; run `make bench` again")
        assert {c["group"] for c in record["cases"]} == GROUPS, name
        assert record["seconds"] < 8 * 60, f"{name}: the suite must fit one 10-minute run"
        for case in record["cases"]:
            if "failed" not in case:  # every timed variant matched its reference first
                assert case["error_vs_reference"] < 2e-2 and case["forward_ms"] > 0, (name, case)
        env = record["environment"]
        assert {"gpu", "compute_capability", "torch", "cuda", "triton", "driver"} <= set(env), name


def test_quick_suite_fits_two_minutes():
    quick = report.quick_records()
    assert quick and all(q["seconds"] < 120 for q in quick)


def ratios(records, group, variant, baseline, key):
    """report.ratios over every record."""
    return [r for record in records.values() for r in report.ratios(record, group, variant, baseline, key)]


def test_training_flex_is_between_flash_and_cudnn(records):
    assert all(r > 1 for r in ratios(records, "training", "flex", "sdpa_flash", "forward_backward_ms"))
    assert all(r < 1 for r in ratios(records, "training", "flex", "sdpa_cudnn", "forward_backward_ms"))


def test_block_masks_beat_dense_masks_and_padding(records):
    assert all(r > 5 for r in ratios(records, "sliding", "flex", "sdpa_dense_mask", "forward_backward_ms"))
    assert all(r > 5 for r in ratios(records, "documents", "flex_packed", "sdpa_dense_mask", "forward_backward_ms"))
    assert all(r > 1 for r in ratios(records, "documents", "flex_packed", "sdpa_padded", "forward_backward_ms"))


def test_decoding_against_sdpa_and_gpt_fast(records):
    assert all(r > 5 for r in ratios(records, "decoding", "flex", "gpt_fast_2024", "forward_ms"))
    against_sdpa = ratios(records, "decoding", "flex", "sdpa_gqa", "forward_ms")
    assert against_sdpa and all(r < 1 for r in against_sdpa), "SDPA with enable_gqa is faster at every shape"


def test_enable_gqa_against_repeat_interleave(records):
    for name, record in records.items():
        rows = report.table(record, "gqa")
        assert {json.loads(k)["q_tokens"] > 1 for k in rows} == {True, False}, "training and decoding"
        for key, row in rows.items():
            assert row["flex_enable_gqa"]["peak_mib"] < row["flex_repeat_interleave"]["peak_mib"], name
            if json.loads(key)["q_tokens"] > 1:  # training: within a few percent
                ratio = report.speedup(row, "flex_enable_gqa", "flex_repeat_interleave", "forward_backward_ms")
                assert 0.9 < ratio < 1.1, (name, ratio)
            else:  # decoding: copying the cache dominates
                assert report.speedup(row, "flex_enable_gqa", "flex_repeat_interleave", "forward_ms") > 5, name


def test_decoding_ratio_does_not_grow_with_context(records):
    for name, record in records.items():
        by_shape = {}
        for key, row in report.table(record, "decoding").items():
            s = json.loads(key)
            by_shape.setdefault((s["model"], s["batch"]), {})[s["kv_tokens"]] = row
        for shape, rows in by_shape.items():
            short, long = rows[min(rows)], rows[max(rows)]
            # against SDPA: no growth beyond run-to-run noise; against the 2024 baseline: growth
            assert report.speedup(long, "flex", "sdpa_gqa", "forward_ms") < \
                1.1 * report.speedup(short, "flex", "sdpa_gqa", "forward_ms"), (name, shape)
            assert report.speedup(long, "flex", "gpt_fast_2024", "forward_ms") > \
                report.speedup(short, "flex", "gpt_fast_2024", "forward_ms"), (name, shape)
