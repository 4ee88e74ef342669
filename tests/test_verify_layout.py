"""verify_layout: the layout arithmetic every backend patch uses, checked by properties."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_spec_plugins.verify_layout import (
    VerifyLayoutError,
    packed_causal_mask,
    qo_indptr,
    width_of,
)

sizes = st.integers(min_value=1, max_value=64)


@given(bs=sizes, width=sizes)
def test_width_round_trips(bs, width):
    assert width_of(bs * width, bs) == width
    assert width_of(bs * width, bs, max_width=width) == width


@given(bs=st.integers(min_value=2, max_value=64), width=sizes, extra=st.integers(min_value=1))
def test_uneven_batches_are_refused(bs, width, extra):
    extra = extra % bs or 1
    with pytest.raises(VerifyLayoutError, match="do not split evenly over"):
        width_of(bs * width + extra, bs, where="trtllm_mha eager")


@given(bs=sizes, width=sizes)
def test_width_above_the_maximum_is_refused(bs, width):
    with pytest.raises(VerifyLayoutError, match=rf"width {width + 1} .* is above the maximum {width}"):
        width_of(bs * (width + 1), bs, max_width=width)


def test_degenerate_batches():
    with pytest.raises(VerifyLayoutError, match="batch_size must be >= 1"):
        width_of(4, 0)
    with pytest.raises(VerifyLayoutError, match="is a width of 0"):
        width_of(0, 3)


@given(bs=sizes, width=sizes)
def test_qo_indptr_slices_each_request(bs, width):
    ptr = qo_indptr(bs, width)
    assert len(ptr) == bs + 1 and ptr[0] == 0 and ptr[-1] == bs * width
    assert all(b - a == width for a, b in zip(ptr, ptr[1:]))


def test_qo_indptr_with_torch_arange():
    torch = pytest.importorskip("torch")
    from functools import partial

    ptr = qo_indptr(3, 4, arange=partial(torch.arange, dtype=torch.int32))
    assert ptr.dtype == torch.int32 and ptr.tolist() == [0, 4, 8, 12]


@given(width=st.integers(min_value=1, max_value=100))
def test_packed_causal_mask_bits(width):
    """Row r sets exactly bits 0..r of its 16-bit words, rows padded to 32 bits."""
    rows = packed_causal_mask(width)
    assert len(rows) == width
    for r, words in enumerate(rows):
        assert len(words) % 2 == 0 and 16 * len(words) >= width > 16 * len(words) - 32
        assert all(0 <= w < 1 << 16 for w in words)
        bits = [bool(words[c // 16] >> (c % 16) & 1) for c in range(16 * len(words))]
        assert bits == [c <= r for c in range(16 * len(words))]


def test_packed_causal_mask_of_nothing():
    with pytest.raises(VerifyLayoutError):
        packed_causal_mask(0)
