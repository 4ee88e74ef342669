"""widths_by_batch_size: bucket lookup, graph sizes and the hysteresis schedule (pure, no SGLang)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_spec_plugins.widths_by_batch_size import (
    WidthsByBatchSize,
    WidthsByBatchSizeError,
    WidthSchedule,
    graph_pairs,
    graph_rows,
    graph_size,
    padded_size,
)

B = WidthsByBatchSize.parse({1: 16, 8: 8, 64: 4})
CAPTURED = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)


def test_lookup():
    assert [B.at(n) for n in (1, 7, 8, 63, 64, 500)] == [16, 16, 8, 8, 4, 4]
    assert B.candidates == (4, 8, 16) and B.maximum == 16
    assert B.as_plain() == {"1": 16, "8": 8, "64": 4} and str(B) == "{1 = 16, 8 = 8, 64 = 4}"


def test_toml_keys_are_strings():
    assert WidthsByBatchSize.parse({"64": 4, "1": 16, "8": 8}) == B


@pytest.mark.parametrize("value, message", [
    ({}, r"expected a non-empty mapping \{min_batch_size: width\}, got \{\}"),
    ([16, 8], r"expected a non-empty mapping \{min_batch_size: width\}, got \[16, 8\]"),
    ({"8": 8}, r"must start at batch size 1 \(got 8\)"),
    ({"1": 16, "x": 8}, "key 'x' is not a batch size"),
    ({"1": 16, "0": 8}, "key '0' is not a batch size"),
    ({"1": 16, "-3": 8}, "key '-3' is not a batch size"),
    ({1: 16, 2.5: 8}, "key 2.5 is not a batch size"),
    ({"1": 16, 1: 8}, "batch size 1 is given twice"),
    ({"1": 0}, "width for batch size 1 must be a positive integer, got 0"),
    ({"1": 4.0}, "width for batch size 1 must be a positive integer, got 4.0"),
    ({"1": True}, "width for batch size 1 must be a positive integer, got True"),
    ({"1": []}, "widths for batch size 1 must not be empty"),
    ({"1": [4, 0]}, r"widths for batch size 1 must be positive integers, got 0"),
    ({"1": [4, "8"]}, r"widths for batch size 1 must be positive integers, got '8'"),
    ({"1": [4, 8, 4]}, r"widths for batch size 1 repeat a width: \[4, 8, 4\]"),
])
def test_bad_buckets(value, message):
    with pytest.raises(WidthsByBatchSizeError, match=message):
        WidthsByBatchSize.parse(value)


def test_padding_follows_sglang():
    assert padded_size(5, CAPTURED) == 8 and padded_size(8, CAPTURED) == 8 and padded_size(129, CAPTURED) is None
    assert padded_size(5, None) is None


def natural_width(buckets, size, captured):
    """A batch's width without hysteresis: a fresh schedule's first answer."""
    return WidthSchedule(buckets, captured).width(size)


def test_width_of_a_padded_batch_is_the_padded_size_s_bucket():
    # 5 requests replay the graph captured for 8, which is captured at bucket 8's width
    assert natural_width(B, 5, CAPTURED) == 8
    assert natural_width(B, 5, None) == 16  # eager: its own size
    assert natural_width(B, 60, CAPTURED) == 4  # pads to 64
    assert natural_width(B, 200, CAPTURED) == 4  # above every graph: eager, own size


@given(st.integers(1, 128))
def test_a_natural_width_always_has_its_graph(bs):
    width = natural_width(B, bs, CAPTURED)
    assert graph_size(B, bs, width, CAPTURED) == padded_size(bs, CAPTURED)


def test_graph_size_at_another_width():
    assert graph_size(B, 30, 4, CAPTURED) == 64  # held at bucket 64's width: the graph captured for 64
    assert graph_size(B, 3, 8, CAPTURED) == 8
    assert graph_size(B, 70, 8, CAPTURED) is None  # no graph above 64 is captured at width 8


def test_no_hysteresis_follows_the_padded_bucket():
    s = WidthSchedule(B, CAPTURED)
    assert [s.width(n) for n in (1, 5, 8, 64, 30, 7, 100)] == [16, 8, 8, 4, 8, 8, 4]


def test_growing_switches_at_once_shrinking_waits_hold_steps():
    s = WidthSchedule(B, CAPTURED, hold_steps=2)
    assert s.width(64) == 4
    assert [s.width(30) for _ in range(3)] == [4, 4, 8]  # two steps held, the third switches
    assert s.width(3) == 8 and s.width(3) == 8 and s.width(3) == 16
    assert s.width(64) == 4  # growing: immediately


def test_a_dip_shorter_than_the_hold_never_switches():
    s = WidthSchedule(B, CAPTURED, hold_steps=2)
    widths = [s.width(n) for n in (64, 60, 40, 64, 40, 40, 64)]
    assert widths == [4, 4, 4, 4, 4, 4, 4]  # 60 pads to 64: same bucket; each dip of 40 is at most 2 steps


def test_holding_needs_a_graph_of_the_held_width():
    s = WidthSchedule(WidthsByBatchSize.parse({1: 16, 8: 8, 200: 4}), CAPTURED, hold_steps=5)
    assert s.width(250) == 4  # above every graph: eager, bucket 200
    assert s.width(100) == 8  # no captured graph has width 4: switch at once


def test_eager_schedule_holds_freely():
    s = WidthSchedule(B, None, hold_steps=1)
    assert [s.width(n) for n in (64, 10, 10, 1, 1)] == [4, 4, 8, 8, 16]


@given(st.lists(st.integers(1, 128), min_size=1, max_size=40), st.integers(0, 4))
def test_every_scheduled_width_has_a_graph(sizes, hold):
    """Whatever the sequence, the width a step gets is served by a captured graph."""
    s = WidthSchedule(B, CAPTURED, hold_steps=hold)
    for n in sizes:
        assert graph_size(B, n, s.width(n), CAPTURED) is not None


def test_bad_schedule_arguments():
    with pytest.raises(WidthsByBatchSizeError, match="hold_steps must be a non-negative integer, got -1"):
        WidthSchedule(B, hold_steps=-1)
    with pytest.raises(ValueError, match="batch size must be >= 1"):
        WidthSchedule(B).width(0)


# -- a set of widths per bucket ---------------------------------------------

C = WidthsByBatchSize.parse({1: [16, 4, 8], 8: [2, 4, 8], 64: [1, 2]})


def test_a_bucket_may_give_widths_to_choose_from():
    assert C.widths == ((4, 8, 16), (2, 4, 8), (1, 2)) and C.chooses and not B.chooses
    assert [C.at(n) for n in (1, 8, 64)] == [16, 8, 2]  # nobody chooses: the bucket's largest
    assert C.widths_at(30) == (2, 4, 8) and C.candidates == (1, 2, 4, 8, 16) and C.maximum == 16
    assert C.as_plain() == {"1": [4, 8, 16], "8": [2, 4, 8], "64": [1, 2]}
    assert str(C) == "{1 = [4, 8, 16], 8 = [2, 4, 8], 64 = [1, 2]}"
    assert WidthsByBatchSize.parse({"1": [8], "8": 4}).as_plain() == {"1": 8, "8": 4}  # a list of one is one width


def test_each_captured_size_has_a_graph_per_width_of_its_bucket():
    pairs = graph_pairs(C, (1, 4, 8, 64, 128))
    assert sorted(pairs) == [(1, 4), (1, 8), (1, 16), (4, 4), (4, 8), (4, 16), (8, 2), (8, 4), (8, 8),
                             (64, 1), (64, 2), (128, 1), (128, 2)]
    assert [w for _, w in pairs] == sorted((w for _, w in pairs), reverse=True)  # widest first, as captured
    assert graph_rows(pairs) == sum(s * w for s, w in pairs) == 1 * 28 + 4 * 28 + 8 * 14 + 64 * 3 + 128 * 3
    assert graph_size(C, 3, 8, (1, 4, 8, 64)) == 4 and graph_size(C, 5, 16, (1, 4, 8, 64)) is None  # 16: eager


@given(st.lists(st.tuples(st.integers(1, 128), st.integers(1, 3)), min_size=1, max_size=40), st.integers(0, 3))
def test_every_width_of_the_bucket_in_use_has_a_graph(steps, hold):
    """Whatever width of its bucket a step chooses, a captured graph of that width holds it."""
    s = WidthSchedule(C, CAPTURED, hold_steps=hold)
    for n, pick in steps:
        widths = C.widths[s.bucket(n)]
        assert graph_size(C, n, widths[min(pick, len(widths)) - 1], CAPTURED) is not None


def test_holding_needs_graphs_of_every_width_of_the_held_bucket():
    table = WidthsByBatchSize.parse({1: 16, 8: [2, 8], 200: [3, 8]})
    s = WidthSchedule(table, CAPTURED, hold_steps=5)
    assert s.bucket(250) == 2  # above every graph: eager, bucket 200
    assert graph_size(table, 100, 8, CAPTURED) == 128 and graph_size(table, 100, 3, CAPTURED) is None
    assert s.bucket(100) == 1  # width 8 would have a graph (bucket 8's), width 3 none: switch at once
