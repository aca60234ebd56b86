"""The memo of values and expected statistics (capture/remembered.py) hands out a result only for
the same values: a tensor changed in place after its first record is recorded anew, however it
was changed (also where torch's version counter does not see it), and a wrong claim still fails
its check when what it is checked against was remembered (and in tests/capture/test_checks.py,
a wrong label with the memo)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from gradexplain.capture import remembered as remembered_module
from gradexplain.capture.checks import check
from gradexplain.capture.remembered import forgetting, keep, remembered, remembering
from gradexplain.capture.values import tensor_value, value_limit
from gradexplain.errors import ComplexValueError
from gradexplain.records.trace import Summary, TensorValue
from tests.helpers.summaries import assert_summary_is_torchs

Change = Callable[[torch.Tensor], None]


@pytest.fixture(autouse=True, params=["memcmp", "without"])
def comparison(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test with the C library's memcmp, and as where ctypes finds none."""
    if request.param == "without":
        monkeypatch.setattr(remembered_module, "_MEMCMP", None)


def _in_place(tensor: torch.Tensor) -> None:
    tensor.mul_(3.0)


def _through_data(tensor: torch.Tensor) -> None:
    tensor.data.mul_(3.0)  # torch's version counter does not count this write


def _replaced_data(tensor: torch.Tensor) -> None:
    tensor.data = tensor.detach() * 3.0


def _counted() -> tuple[list[torch.Tensor], Callable[[torch.Tensor], float]]:
    calls: list[torch.Tensor] = []

    def total(tensor: torch.Tensor) -> float:
        calls.append(tensor)
        return float(tensor.sum())
    return calls, total


def test_the_same_values_are_computed_once() -> None:
    tensor = torch.arange(6.0).reshape(2, 3)
    calls, total = _counted()
    with remembering():
        assert remembered(tensor, "sum", total) == 15.0
        assert remembered(tensor, "sum", total) == 15.0
        assert remembered(tensor.detach(), "sum", total) == 15.0  # another view of the same
        assert remembered(tensor.t(), "sum", total) == 15.0  # another layout: computed again
        assert remembered(tensor, "other", total) == 15.0  # another kind: computed again
    assert len(calls) == 3
    assert remembered(tensor, "sum", total) == 15.0  # outside the block: always computed
    assert len(calls) == 4


def test_nothing_is_remembered_while_forgetting() -> None:
    tensor = torch.arange(6.0)
    calls, total = _counted()
    with remembering():
        remembered(tensor, "sum", total)
        with forgetting():
            remembered(tensor, "sum", total)
            remembered(tensor, "sum", total)
        remembered(tensor, "sum", total)
    assert len(calls) == 3


def test_a_result_of_the_values_alone_is_shared_by_tensors_of_the_same_values() -> None:
    """Another tensor of the same bits and layout (another pass's) takes an `alike` result;
    one that differs only inside (its first and last bytes alike), another layout, or a
    result tied to the tensor, is computed again."""
    first = torch.arange(64.0).reshape(8, 8)
    same = first.clone()
    inside = first.clone()
    inside[4, 4] = -1.0
    calls, total = _counted()
    with remembering():
        for tensor in (first, same, inside, first.t().contiguous().t()):
            assert remembered(tensor, "sum", total, alike=True) == float(tensor.sum())
        assert remembered(same, "tied", total) == float(same.sum())
    assert len(calls) == 4  # first, inside, the transposed layout, and the tied kind
    assert calls[0] is first and calls[1] is inside and calls[3] is same


# Small tensors are compared with their copy as bytes, large ones by torch (`remembered._same`).
SIZES = [(2, 3), (300, 300)]


def _values(size: tuple[int, int]) -> torch.Tensor:
    return torch.linspace(-3.0, 4.0, math.prod(size)).reshape(size)


@pytest.mark.parametrize("size", SIZES, ids=["small", "large"])
@pytest.mark.parametrize("change", [_in_place, _through_data, _replaced_data])
@pytest.mark.parametrize("limit", [None, 4])  # values, and summaries
def test_a_tensor_changed_after_its_first_record_is_recorded_anew(
        size: tuple[int, int], change: Change, limit: int | None) -> None:
    tensor = _values(size)
    with value_limit(limit), remembering():
        first = tensor_value(tensor)
        change(tensor)
        second = tensor_value(tensor)
        again = tensor_value(tensor)
    with value_limit(limit):
        fresh = tensor_value(tensor * 1.0)
    assert second == fresh and again == fresh
    assert first != second
    if limit is not None:
        assert second is not None and second.summary is not None
        assert second.summary.max == pytest.approx(12.0)


@pytest.mark.parametrize("shape", [(6, 5), (300, 200), (5, 5)], ids=["oblong", "large", "square"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_tensor_and_its_transpose_on_the_same_memory_share_one_summary(
        shape: tuple[int, int], dtype: torch.dtype) -> None:
    """A Linear's weight gradient is handed to hooks as the transpose of its `.grad`, on the
    same memory: one summary serves both. Each record has its own shape, is the same object
    each time (a check against it is remembered by its id), and is what torch computes in
    its own layout."""
    grad = torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(3))
    transposed = grad.t()
    with value_limit(4), remembering():
        first, second = tensor_value(transposed), tensor_value(grad)
        assert first is not None and second is not None
        assert first.summary is second.summary
        assert tensor_value(transposed) is first and tensor_value(grad) is second
    assert first.shape == shape[::-1] and second.shape == shape
    assert_summary_is_torchs(first, transposed)
    assert_summary_is_torchs(second, grad)


@pytest.mark.parametrize("size", SIZES, ids=["small", "large"])
@pytest.mark.parametrize("change", [_in_place, _through_data])
def test_a_transpose_changed_after_the_summary_is_summarised_anew(
        size: tuple[int, int], change: Change) -> None:
    """The shared summary is handed out only for the same values: after a change to the
    memory both layouts read (counted by torch or not), the transpose's is computed again."""
    grad = _values(size)
    with value_limit(4), remembering():
        before = tensor_value(grad)
        change(grad)
        after = tensor_value(grad.t())
    assert before is not None and after is not None and after.summary != before.summary
    assert_summary_is_torchs(after, grad.t())


def _zeros_of_both_signs(seed: int, dtype: torch.dtype) -> torch.Tensor:
    """Positive values with a few zeros of either sign: which zero is the least depends on
    the order the values are read in."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.rand(64, 48, dtype=dtype, generator=generator) + 1.0
    places = torch.randint(0, 48, (6, 2), generator=generator).tolist()
    for number, (row, column) in enumerate(places):
        values[row, column] = -0.0 if number % 2 else 0.0
    return values


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_transposes_zero_is_the_one_torch_gives_in_its_own_layout(
        seed: int, dtype: torch.dtype) -> None:
    """Summarised first in memory order, then handed out for the transpose: where the least
    is a zero, it is the zero torch gives reading the transpose in its layout."""
    values = _zeros_of_both_signs(seed, dtype)
    with value_limit(4), remembering():
        in_order, transposed = tensor_value(values), tensor_value(values.t())
    assert_summary_is_torchs(in_order, values)
    assert_summary_is_torchs(transposed, values.t())


@pytest.mark.parametrize("limit", [None, 4])  # values, and summaries
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_complex_tensor_is_refused_recorded_in_full_or_summarised(
        limit: int | None, layout: str) -> None:
    """gradexplain labels real-valued gradients only: a complex tensor is refused with its
    own error whether its record would be its values or a summary, in any layout."""
    tensor = torch.randn(6, 5, dtype=torch.complex64)
    tensor = tensor.t() if layout == "transposed" else tensor
    for memo in (remembering, forgetting):
        with value_limit(limit), memo(), pytest.raises(ComplexValueError, match="complex"):
            tensor_value(tensor)


@pytest.mark.parametrize("size", SIZES, ids=["small", "large"])
def test_minus_zero_is_not_zero(size: tuple[int, int]) -> None:
    """Equal as numbers, but recorded (and printed) differently: told apart by their bits."""
    tensor = torch.zeros(size)
    with remembering():
        first = _signs(tensor_value(tensor))
        tensor.data.neg_()
        changed = _signs(tensor_value(tensor))
    assert first == {1.0} and changed == {-1.0}


def _signs(value: TensorValue | None) -> set[float]:
    """The signs of the numbers recorded (of the extremes, for a summary)."""
    assert value is not None
    if value.summary is not None:
        numbers = [value.summary.min, value.summary.max]
    else:
        assert isinstance(value.value, list)
        numbers = [float(item) for row in value.value for item in row]  # type: ignore[union-attr, arg-type]
    return {math.copysign(1.0, number) for number in numbers}


def test_a_freed_tensors_address_reused_by_other_values() -> None:
    """A tensor freed and another made in its memory, with the same shape and version: the
    key is the same, the values are not."""
    with remembering():
        seen = []
        for number in range(20):
            tensor = torch.full((4, 5), float(number))
            seen.append(tensor_value(tensor))
            del tensor
    for number, value in enumerate(seen):
        assert value == TensorValue((4, 5), "float32", [[float(number)] * 5] * 4)


def test_a_kept_tensor_is_compared_once_and_still_recorded_anew_when_torch_counts_a_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor `keep` marks as the capture's own (the check run's gradients) is compared with
    its entry's copy on its first use only; an in-place change torch counts still gives it
    another entry, so it is computed again."""
    compared: list[int] = []
    real_same = remembered_module._same

    def counting(tensor: torch.Tensor, copy: torch.Tensor) -> bool:
        compared.append(tensor.data_ptr())
        return real_same(tensor, copy)

    monkeypatch.setattr(remembered_module, "_same", counting)
    tensor, other = torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(2, 3) + 1
    calls, total = _counted()
    with remembering():
        assert remembered(tensor, "sum", total) == 15.0  # its entry, made before it is kept
        keep([tensor])
        for _ in range(3):
            assert remembered(tensor, "sum", total) == 15.0
            assert remembered(tensor.detach(), "sum", total) == 15.0
            assert remembered(other, "sum", total) == 21.0
        assert compared.count(tensor.data_ptr()) == 1  # its first use once kept
        fresh = torch.arange(4.0) * 2
        keep([fresh])
        assert remembered(fresh, "sum", total) == 12.0
        memo = remembered_module._memo.get()
        assert memo is not None
        entry = memo.entries[remembered_module._key(fresh)]
        assert entry.copy.data_ptr() == fresh.data_ptr()  # kept: its own copy, none made
        assert memo.entries[remembered_module._key(other)].copy.data_ptr() != other.data_ptr()
        assert compared.count(other.data_ptr()) == 2  # not kept: every use after the first
        tensor.mul_(2.0)
        assert remembered(tensor, "sum", total) == 30.0
    assert len(calls) == 4


def test_a_kept_tensor_at_a_freed_tensors_address_is_not_taken_for_it() -> None:
    """A tensor recorded and freed, and a kept one made in its memory with the same shape and
    version: its first use compares, and finds other values."""
    with remembering():
        for number in range(20):
            freed = torch.full((4, 5), float(number))
            assert tensor_value(freed) == TensorValue((4, 5), "float32", [[float(number)] * 5] * 4)
            del freed
            kept = torch.full((4, 5), float(number) + 0.5)
            keep([kept])
            want = TensorValue((4, 5), "float32", [[float(number) + 0.5] * 5] * 4)
            assert tensor_value(kept) == want and tensor_value(kept) == want
            del kept


@pytest.mark.parametrize("make", [
    lambda: torch.arange(12.0).reshape(3, 4).t(),  # one block, another order
    lambda: torch.arange(4.0).expand(3, 4),  # every value three times
    lambda: torch.arange(24.0).reshape(4, 6)[:, ::2],  # values with gaps between
    lambda: torch.arange(6, dtype=torch.int64),
    lambda: torch.tensor([True, False]),
], ids=["transposed", "expanded", "strided", "integers", "booleans"])
def test_every_layout_is_recorded_as_without_the_memo(make: Callable[[], torch.Tensor]) -> None:
    for limit in (None, 2):
        with value_limit(limit):
            plain = tensor_value(make())
            with remembering():
                tensor = make()
                assert tensor_value(tensor) == plain
                assert tensor_value(tensor) == plain


def test_a_remembered_expected_value_checks_what_it_is_now() -> None:
    """A check against an expected tensor remembered, then changed: against its new values."""
    expected = torch.tensor([0.5, -1.0])
    right, before = (TensorValue((2,), "float32", [1.0, -2.0]),
                     TensorValue((2,), "float32", [0.5, -1.0]))
    with remembering():
        assert check(before, expected).verified
        assert not check(right, expected).verified
        expected.data.mul_(2.0)
        assert check(right, expected).verified
        assert not check(before, expected).verified


def test_a_wrong_summary_fails_against_a_remembered_expected_value() -> None:
    expected = torch.linspace(-1.0, 2.0, 12)
    with value_limit(4):
        recorded = tensor_value(expected)
    assert recorded is not None and recorded.summary is not None
    low, high, mean, norm = (recorded.summary.min, recorded.summary.max, recorded.summary.mean,
                             recorded.summary.norm)
    wrong = [Summary(low, high, mean + 0.01, norm), Summary(low, high * 1.001, mean, norm),
             Summary(low, high, mean, norm * 0.99)]
    with remembering():
        assert check(recorded, expected).verified
        for summary in wrong:
            assert not check(TensorValue(recorded.shape, "float32", None, summary),
                             expected).verified
        assert check(recorded, expected).verified
