"""How `analysis.distributed_diff` matches a hook call of one process with the same call under
the wrapping, and when two recorded values are the same. No torch here.

A call is the n-th call of its hook kind on its target by its function (`_head`): where it
fires does not matter. A node hook's target is its node's name: the walk numbers nodes in graph
order (`n16`), and a node the wrapping adds (FSDP2's RegisterPostBackwardFunctionBackward)
shifts the numbers of every node after it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence

from gradexplain.records.distributed_diff import node_title
from gradexplain.records.trace import HookKind, Nested, TensorValue
from gradexplain.records.walk import LabelledEvent

# Two values recorded in two processes from identical builds are the same within this much of
# the larger one's largest element (float32 arithmetic in another order: the checks' allowance).
RELATIVE = 1e-4
NODE_HOOKS = ("node_pre", "node")

Head = tuple[HookKind, str, str | None, str | None]


def same_values(left: TensorValue | None, right: TensorValue | None) -> bool:
    """The same shape and numbers (within RELATIVE), or None on both sides."""
    if left is None or right is None:
        return left is None and right is None
    if tuple(left.shape) != tuple(right.shape):
        return False
    if left.value is None or right.value is None:
        if left.summary is None or right.summary is None:
            return False
        ours = (left.summary.min, left.summary.max, left.summary.mean, left.summary.norm)
        theirs = (right.summary.min, right.summary.max, right.summary.mean,
                  right.summary.norm)
        return _close(list(ours), list(theirs))
    return _close(_flat(left.value), _flat(right.value))


def _flat(value: Nested) -> list[float]:
    if isinstance(value, list):
        return [number for item in value for number in _flat(item)]
    return [float(value)]


def _close(left: list[float], right: list[float]) -> bool:
    if len(left) != len(right):
        return False
    finite = [abs(number) for number in left + right if math.isfinite(number)]
    allowed = RELATIVE * max(finite, default=0.0)
    return all(a == b or abs(a - b) <= allowed for a, b in zip(left, right, strict=True))


def pairs(singles: Sequence[LabelledEvent],
           wrapped: Sequence[LabelledEvent]) -> dict[int, int]:
    """Which call of one process (by position) each wrapped call (by position) is.

    A call is the n-th call of its hook kind on its target by its function (`_head`). A node
    hook is first matched by the tensor its first argument is the gradient of, as well: the
    wrapping may change the order in which the engine runs nodes of the same name (FSDP2 runs
    an input's AccumulateGrad after its own node, one process before a parameter's), and the
    tensor says which is which where both runs name it alike. The node hooks left over (a
    parameter FSDP2 gathered into a leaf of its own, named otherwise) are then matched in
    order."""
    found: dict[int, int] = {}
    for anchored in (True, False):
        # the second round is for node hooks alone: every other call was matched by its head
        skip_singles = set(found.values()) | ({index for index, event in enumerate(singles)
                                               if event.hook not in NODE_HOOKS}
                                              if not anchored else set())
        skip_wrapped = set(found) | ({index for index, event in enumerate(wrapped)
                                      if event.hook not in NODE_HOOKS}
                                     if not anchored else set())
        left = {key: index for index, key in _numbered(singles, anchored, skip_singles)}
        for index, key in _numbered(wrapped, anchored, skip_wrapped):
            if key in left:
                found[index] = left[key]
    return found


def _numbered(events: Sequence[LabelledEvent], anchored: bool,
              skip: set[int]) -> Iterator[tuple[int, tuple[Head, int]]]:
    """Each event not in `skip` (by position) with its key: its head and its occurrence
    among the others with that head (1 for the first)."""
    seen: Counter[Head] = Counter()
    for index, event in enumerate(events):
        if index in skip:
            continue
        head = _head(event, anchored)
        seen[head] += 1
        yield index, (head, seen[head])


def _head(event: LabelledEvent, anchored: bool) -> Head:
    """Hook kind, target (a node hook's: its node's name), the user's function, and with
    `anchored` a node hook's tensor (what its first argument is the gradient of)."""
    if event.hook not in NODE_HOOKS:
        return event.hook, event.target, event.user, None
    anchor = None
    if anchored:
        meaning = next((arg.meaning for arg in event.args if arg.meaning is not None), None)
        anchor = "" if meaning is None else meaning.wrt
    return event.hook, node_name(event.node), event.user, anchor


def occurrences(events: Sequence[LabelledEvent]) -> list[int]:
    """Each call's number among the walk's calls of its hook on its target (1 first)."""
    numbers = {index: number for index, (_, number) in _numbered(events, False, set())}
    return [numbers[index] for index in range(len(events))]


def node_name(node: str | None) -> str:
    return node_title(node or "?")


__all__ = ["NODE_HOOKS", "node_name", "occurrences", "pairs", "same_values"]
