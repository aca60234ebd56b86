"""The `--pass`, `--module` and `--hook` filters: a smaller Walk, for every renderer alike."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from gradexplain.records.trace import HookKind, Mode
from gradexplain.records.walk import LabelledEvent, Walk

MODULE_HOOKS = ("forward_pre", "forward", "backward", "full_backward_pre", "full_backward")
TENSOR_HOOKS = ("tensor", "post_accumulate_grad")


def select(walk: Walk, modes: Collection[Mode], module: str | None,
           hooks: Collection[HookKind]) -> Walk:
    """Keep the passes in `modes`, and the events of `hooks` (all if empty) that belong to
    `module` or below it (all if None): its module hooks and its tensors' hooks."""
    passes = tuple(
        replace(walk_pass, events=tuple(event for event in walk_pass.events
                                        if _keeps(event, module, hooks)))
        for walk_pass in walk.passes if walk_pass.mode in modes
    )
    return replace(walk, passes=passes)


def _keeps(event: LabelledEvent, module: str | None, hooks: Collection[HookKind]) -> bool:
    if hooks and event.hook not in hooks:
        return False
    if not module:
        return True
    if event.hook in MODULE_HOOKS:
        return event.target == module or event.target.startswith(module + ".")
    if event.hook in TENSOR_HOOKS:
        return event.target.startswith(module + ".")
    return False
