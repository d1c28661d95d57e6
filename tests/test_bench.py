"""The benchmark suite and its records: the program's bad-input paths on this machine, and the
records of `make bench` well-formed, complete, current and saying what the pages say."""
import json
import warnings

import pytest

from guide import bench as report
from tests.helpers import python

GROUPS = {"training", "sliding", "documents", "score_mod", "end_to_end", "gallery", "decoding", "gqa",
          "decoding_settings", "forward_settings"}


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
            if "failed" in case:
                continue
            if case["group"] == "end_to_end":  # every timed training step began with the reference's loss
                assert case["loss_vs_reference"] < 1e-2 and case["step_ms"] > 0, (name, case)
            else:  # every timed variant matched its reference first
                assert case["error_vs_reference"] < 2e-2 and case["forward_ms"] > 0, (name, case)
        env = record["environment"]
        assert {"gpu", "compute_capability", "torch", "cuda", "triton", "driver"} <= set(env), name


def test_every_gallery_mask_is_timed_against_sdpa_with_its_dense_mask(records):
    """Each mask of snippets/gallery.py, forward and backward: FlexAttention with its BlockMask and SDPA given
    the mask as a dense tensor, both checked against the dense-mask reference before timing."""
    from snippets import gallery

    for record in records.values():
        rows = {json.loads(key)["mask"]: row for key, row in report.table(record, "gallery").items()}
        assert set(rows) == set(gallery.examples(4096)), "every gallery mask, once"
        for mask, row in rows.items():
            assert set(row) == {"flex", "sdpa_dense_mask"}, mask
            assert all("failed" not in case and case["forward_backward_ms"] > 0 for case in row.values()), mask


def test_quick_suite_fits_two_minutes():
    quick = report.quick_records()
    assert quick and all(q["seconds"] < 120 for q in quick)


def ratios(records, group, variant, baseline, key):
    """report.ratios over every record."""
    return [r for record in records.values() for r in report.ratios(record, group, variant, baseline, key)]


def test_training_flex_is_between_flash_and_cudnn(records):
    """FlexAttention's Triton kernels in forward and backward: slower than cuDNN at every training shape,
    faster than FlashAttention 2 at every shape of 2048 tokens per sequence or more."""
    assert all(r < 1 for r in ratios(records, "training", "flex", "sdpa_cudnn", "forward_backward_ms"))
    for name, record in records.items():
        for key, row in report.table(record, "training").items():
            if json.loads(key)["tokens"] >= 2048:
                assert report.speedup(row, "flex", "sdpa_flash", "forward_backward_ms") > 1, (name, key)


def test_where_flex_attention_is_slower_than_sdpa(records):
    """The troubleshooting entry's oracle: plain causal, cuDNN first at every shape; with a sliding window
    or packed documents, FlexAttention first."""
    assert all(r < 1 for r in ratios(records, "training", "flex", "sdpa_cudnn", "forward_backward_ms"))
    assert all(r > 1 for r in ratios(records, "sliding", "flex", "sdpa_dense_mask", "forward_backward_ms"))
    assert all(r > 1 for r in ratios(records, "documents", "flex_packed", "sdpa_padded", "forward_backward_ms"))


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


def test_flash_beats_cudnn_on_long_sequences_and_loses_on_short_ones(records):
    """Every FLASH variant ran. In forward and backward, FLASH beats SDPA's cuDNN backend and the Triton
    kernels at 8192 tokens per sequence and more, at both head dimensions, is slower than the Triton
    kernels at 1024, and beats them with the soft-cap score_mod; the page's table names the length
    from which it beat cuDNN, at most 8192."""
    from guide.site import performance

    for name, record in records.items():
        flash = [c for c in record["cases"] if c["variant"] in ("flex_flash", "flex_packed_flash")
                 or c["variant"] == 'flex {"BACKEND": "FLASH"}']
        assert len(flash) >= 14 and not [c for c in flash if "failed" in c], name
        for key, row in report.table(record, "training").items():
            tokens = json.loads(key)["tokens"]
            if tokens >= 8192:
                assert report.speedup(row, "flex_flash", "sdpa_cudnn", "forward_backward_ms") > 1, (name, key)
                assert report.speedup(row, "flex_flash", "flex", "forward_backward_ms") > 1, (name, key)
            if tokens == 1024:
                assert report.speedup(row, "flex_flash", "flex", "forward_backward_ms") < 1, (name, key)
        score = next(iter(report.table(record, "score_mod").values()))
        assert report.speedup(score, "flex_flash", "flex", "forward_backward_ms") > 1, name
        # the length the page names: FLASH beat cuDNN at every shape that long or longer, not just below
        start = performance.flash_from(record)
        assert start is not None and start <= 8192, (name, start)
        by_length = {}
        for key, row in report.table(record, "training").items():
            by_length.setdefault(json.loads(key)["tokens"], []).append(
                row["flex_flash"]["forward_backward_ms"] < row["sdpa_cudnn"]["forward_backward_ms"])
        assert all(all(wins) for tokens, wins in by_length.items() if tokens >= start), name
        shorter = [tokens for tokens in by_length if tokens < start]
        assert not shorter or not all(by_length[max(shorter)]), (name, start)


def test_flash_decodes_far_slower_than_the_triton_decoding_kernel(records):
    for name, record in records.items():
        row = next(iter(report.table(record, "decoding_settings").values()))
        assert report.speedup(row, "flex", 'flex {"BACKEND": "FLASH"}', "forward_ms") > 2, name
        assert report.speedup(row, "sdpa_gqa", 'flex {"BACKEND": "FLASH"}', "forward_ms") > 2, name


def test_end_to_end_packing_gains_with_the_share_of_padding(records):
    """The training step's gain follows the tokens padding adds; the two FlexAttention backends are
    within 10% of each other, attention being a small part of this model's step."""
    for name, record in records.items():
        row = next(iter(report.table(record, "end_to_end").values()))
        padding = row["sdpa_padded"]["tokens_computed"] / row["flex_packed"]["tokens_computed"]
        gain = report.speedup(row, "flex_packed", "sdpa_padded", "step_ms")
        assert padding > 2 and 0.5 * padding < gain < 1.5 * padding, (name, padding, gain)
        assert 0.9 < report.speedup(row, "flex_packed_flash", "flex_packed", "step_ms") < 1.1, name


@pytest.mark.parametrize("chart", ["training", "decoding", "roofline"])
def test_a_chart_keeps_its_legend_off_its_plots(chart):
    """Drawn from the committed benchmark records, in English and in Hindi (the longest labels): no legend
    covers a plot, by matplotlib's own extents of each legend and each plot; a legend put inside the plot
    fails the build with the chart's name."""
    from guide.project import GuideError
    from guide.site import performance

    draw = getattr(performance, chart).__wrapped__  # not the cached file: drawn here
    for lang in ("en", "hi"):
        assert "bench-chart" in draw(lang, report.load_all())
    fig, axes = performance.figure()
    axes[0][0].plot(range(10), label="a series")
    axes[0][0].legend(loc="center")
    assert performance.overlapping_legends(fig) == ["a series"]
    with pytest.raises(GuideError, match="the legend of the chart 'a chart' that begins 'a series' covers its plot"):
        performance.svg(fig, "a chart")


def test_a_stale_benchmark_record_is_named_above_the_first_table_of_the_page(monkeypatch):
    """The performance page opens with the choice table: a record made before the last change to
    snippets/bench.py is named in a warning above it, and only there."""
    from guide.site import performance
    from tests.helpers import ROOT

    records = report.load_all()
    for current in (True, False):
        monkeypatch.setattr(report, "current", lambda record: current)
        choose, environments = (performance.render(name, "en", records) for name in ("choose", "environments"))
        assert choose.startswith("!!! warning") is not current and not environments.startswith("!!! warning")
        if not current:
            assert all(performance.gpu_label(r) in choose.splitlines()[0] for r in records.values())
    text = (ROOT / "docs" / "en" / "performance.md").read_text(encoding="utf-8")
    assert text.index("<!-- bench: ") == text.index("<!-- bench: choose -->")  # the page's first block
