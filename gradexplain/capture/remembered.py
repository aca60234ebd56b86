"""What was computed from a tensor's values, remembered for the next time the same values come:
the one memo of the capture, for recorded values (`values.tensor_value`) and a check's expected
statistics (`checks.check`).

A deep model's hooks hand the same tensor to several hooks (a gradient goes to a node's
post-hook, the next node's pre-hook, a module's backward hook and a tensor hook), and thousands of
checks compare against a few hundred distinct tensors; each summary costs several small torch
calls, which cost more than their arithmetic. So within a `remembering()` block each result is
computed once per distinct tensor state.

A remembered result is only handed out for the same values, and the key alone is not trusted
for that. The key (the address of its first value, shape, strides, dtype, version counter) finds
a candidate: a tensor read at the same place in the same layout, not changed in place since as
torch counts changes (so a summary's reductions run in the same order on the same memory). But
writes through `.data` or a numpy view leave the version counter as it was, and a freed tensor's
address can be reused by another; so a candidate is taken only if the tensor equals, bit for
bit, the copy kept when the result was computed. Otherwise the result is computed again.

A result that depends on the values and their layout alone (a recorded value, not a check's
statistics, which keep the tensor) is also shared with another tensor of the same bits, shape,
strides, dtype and alignment, found by its first and last bytes and then compared in full: the
full pass and the check run compute the legacy pass's values again. The capture keeps one block
for both passes and the checks (`pipeline`).

The check run's gradients are the capture's own, and nothing runs on them once computed: they
are `keep`-ed, and compared with their entry's copy only on first use (which finds a freed
tensor's entry at the same address), not at each of the thousands of checks against them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, cast

import torch

T = TypeVar("T")

# The dtypes remembered: those whose bytes are their values (not complex, not quantized).
PLAIN_DTYPES = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16,
                          torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                          torch.bool})
# Up to this many bytes a tensor is compared with its copy as bytes read directly; above it, by
# torch (reading a large tensor as one bytes object costs fresh pages from the system).
_AS_BYTES = 1 << 18
_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})  # not subclasses, which may read otherwise
_LOOK = 32  # bytes read from each end of a tensor to find others of the same values
_INTEGERS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class _Entry:
    """One tensor state: a copy of its values, what each kind computed from the tensor, and
    what each kind computed from the values alone (`alike`), shared by every entry whose
    tensor holds the same bits in the same layout."""

    __slots__ = ("alike", "copy", "results")

    def __init__(self, copy: torch.Tensor, alike: dict[Hashable, Any]) -> None:
        self.copy = copy
        self.results: dict[Hashable, Any] = {}
        self.alike = alike


class _Memo:
    """One `remembering()` block: the entries by key, and by what their values look like; the
    keys of tensors `kept` (each tensor held, so that its address stays its own), and those of
    them whose entry has been compared once."""

    __slots__ = ("compared", "entries", "kept", "looks")

    def __init__(self) -> None:
        self.entries: dict[Hashable, _Entry] = {}
        self.looks: dict[Hashable, list[_Entry]] = {}
        self.kept: dict[Hashable, torch.Tensor] = {}
        self.compared: set[Hashable] = set()


_memo: ContextVar[_Memo | None] = ContextVar("gradexplain_memo", default=None)


@contextmanager
def remembering() -> Iterator[None]:
    """Within the block, `remembered` keeps what it computes (and a copy of each tensor it
    computed from, until the block ends)."""
    token = _memo.set(_Memo())
    try:
        yield
    finally:
        _memo.reset(token)


@contextmanager
def forgetting() -> Iterator[None]:
    """Within the block, nothing is remembered: for a tensor made for one use (a sum computed
    for one check), whose copy would only cost its size again."""
    token = _memo.set(None)
    try:
        yield
    finally:
        _memo.reset(token)


def remembered(tensor: torch.Tensor, kind: Hashable, compute: Callable[[torch.Tensor], T],
               alike: bool = False) -> T:
    """`compute(tensor)`, or what it returned for the same values before in this block. `kind`
    tells apart what different callers compute (and anything else the result depends on).
    `alike`: the result depends on the values and their layout alone, not on the tensor (it
    keeps no reference to it), so it is also taken from another tensor of the same bits, shape,
    strides, dtype and alignment (the legacy and full passes compute the same values; the check
    run too). Only a plain tensor whose values fill one block of CPU memory is remembered."""
    memo = _memo.get()
    if memo is None or not _keyed(tensor):
        return compute(tensor)
    key = _key(tensor)
    kept = key in memo.kept
    entry = memo.entries.get(key)
    if entry is None:
        if not _rememberable(tensor):
            return compute(tensor)
        entry = memo.entries[key] = _new_entry(memo, tensor, kept)
    elif key not in memo.compared and not _same(tensor, entry.copy):
        # An entry is only made for a tensor `_rememberable` allows, and the key holds what
        # that depends on beyond `_keyed` (shape, strides, dtype): this tensor is one too.
        entry = memo.entries[key] = _new_entry(memo, tensor, kept)
    if kept:
        memo.compared.add(key)
    found = entry.alike if alike else entry.results
    if kind in found:
        return cast(T, found[kind])
    result = found[kind] = compute(tensor)
    return result


def keep(tensors: Iterable[torch.Tensor | None]) -> None:
    """Within the block, these tensors are the capture's own and no code changes them from now
    on (the check run's gradients, once it has run): each is held, so that no other tensor
    takes its address, and after its first use here its entry is taken without comparing its
    values again. A deep model's checks and chain rule compare thousands of times against a
    few hundred of them, and comparing their bytes each time cost more than the checks. A
    view of one in the same layout (`detach()`) is the same values, and found the same way;
    an in-place change that torch counts gives another key."""
    memo = _memo.get()
    if memo is None:
        return
    for tensor in tensors:
        if tensor is not None and _rememberable(tensor):
            memo.kept.setdefault(_key(tensor), tensor)


def _keyed(tensor: torch.Tensor) -> bool:
    """Whether a tensor has a `_key`: a plain strided CPU tensor that counts its changes."""
    return (type(tensor) in _TYPES and tensor.is_cpu and tensor.layout == torch.strided
            and not tensor.is_inference())


def _rememberable(tensor: torch.Tensor) -> bool:
    """Whether results computed from a tensor are remembered: a plain tensor whose values fill
    one block of CPU memory (see `remembered`)."""
    return (_keyed(tensor) and tensor.dtype in PLAIN_DTYPES and tensor.numel() > 0
            and _one_block(tensor))


def _key(tensor: torch.Tensor) -> Hashable:
    """Where a tensor's values are, in what layout, and torch's count of in-place changes."""
    return (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor._version)


def _new_entry(memo: _Memo, tensor: torch.Tensor, kept: bool) -> _Entry:
    """An entry for a tensor state not met at this key: sharing the copy and the values-alone
    results of an entry whose tensor held the same bits in the same layout, if there is one.
    A `kept` tensor is its own copy: nothing changes it."""
    address, size = tensor.data_ptr(), tensor.nbytes
    # What the values look like: their layout, alignment (a float64 tensor is reduced where it
    # lies, and vectorised reads may depend on it) and first and last bytes.
    look = (tensor.shape, tensor.stride(), tensor.dtype, address % 64,
            ctypes.string_at(address, min(size, _LOOK)),
            ctypes.string_at(address + max(size - _LOOK, 0), min(size, _LOOK)))
    same = memo.looks.setdefault(look, [])
    for other in same:
        if _same(tensor, other.copy):
            return _Entry(other.copy, other.alike)
    if kept:
        entry = _Entry(tensor.detach(), {})
    else:
        # The copy in the tensor's own layout, so that its memory reads in the same order.
        copy = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype)
        entry = _Entry(copy.copy_(tensor.detach()), {})
    same.append(entry)
    return entry


def _one_block(tensor: torch.Tensor) -> bool:
    """Whether the tensor's values fill the memory from its first one, each once, in some
    order of its dimensions: contiguous, or a transpose of it (a Linear's weight gradient)."""
    if tensor.is_contiguous():
        return True
    step = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride(), strict=True),
                               key=lambda pair: pair[1]):
        if size != 1:
            if stride != step:
                return False
            step *= size
    return True


def same_bits(tensor: torch.Tensor, copy: torch.Tensor) -> bool:
    """Whether a contiguous CPU tensor and its copy hold the same bits, in the same shape and
    dtype (a dtype whose bytes are its values: `PLAIN_DTYPES`)."""
    return (tensor.dtype in PLAIN_DTYPES and copy.dtype == tensor.dtype
            and copy.shape == tensor.shape and tensor.is_contiguous() and copy.is_contiguous()
            and _same(tensor, copy))


def _same(tensor: torch.Tensor, copy: torch.Tensor) -> bool:
    """Whether two one-block CPU tensors of one shape, strides and dtype hold the same bits (so
    -0.0 and 0.0 differ, and a nan equals itself)."""
    if _MEMCMP is not None:
        # The C library's comparison of the two blocks: no copy, no torch call.
        return _MEMCMP(tensor.data_ptr(), copy.data_ptr(), tensor.nbytes) == 0
    if tensor.nbytes <= _AS_BYTES:
        # Read directly, as one copy each: for small tensors two to three times as fast as
        # torch.equal on the bits.
        return (ctypes.string_at(tensor.data_ptr(), tensor.nbytes)
                == ctypes.string_at(copy.data_ptr(), copy.nbytes))
    return torch.equal(_bits(tensor.detach()), _bits(copy))


def _c_memcmp() -> Callable[[int, int, int], int] | None:
    """memcmp from the C library the interpreter runs on, where ctypes finds it."""
    for library in ("", "msvcrt"):  # "": the process's own symbols (Linux, macOS)
        try:
            found = ctypes.CDLL(library or None).memcmp
        except (OSError, AttributeError, TypeError):
            continue
        found.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        found.restype = ctypes.c_int
        return cast(Callable[[int, int, int], int], found)
    return None


_MEMCMP = _c_memcmp()


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """A float tensor viewed as integers of its width; any other as it is."""
    if not tensor.is_floating_point():
        return tensor
    return tensor.view(_INTEGERS[tensor.element_size()])
