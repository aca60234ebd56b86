"""The `--pass`, `--module` and `--hook` filters: a smaller Walk, for every renderer alike; and
`--module` for the diff, a HookDiff of fewer modules. Both ask records/paths.py what belongs to
a module."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from gradexplain.records.diff import HookDiff
from gradexplain.records.paths import in_module, inside
from gradexplain.records.trace import HookKind, Mode
from gradexplain.records.walk import LabelledEvent, Walk

MODULE_HOOKS = ("forward_pre", "forward", "backward", "full_backward_pre", "full_backward")
TENSOR_HOOKS = ("tensor", "post_accumulate_grad")


def select(walk: Walk, modes: Collection[Mode], module: str | None,
           hooks: Collection[HookKind]) -> Walk:
    """Keep the passes in `modes`, and the events of `hooks` (all if empty) that belong to
    `module` or below it (all if None): its module hooks and its tensors' hooks."""
    passes = tuple(
        # Without a filter every event is kept: the pass as it is (a deep model's are long).
        walk_pass if not module and not hooks
        else replace(walk_pass, events=tuple(event for event in walk_pass.events
                                             if _keeps(event, module, hooks)))
        for walk_pass in walk.passes if walk_pass.mode in modes
    )
    return replace(walk, passes=passes)


def select_diff(diff: HookDiff, module: str | None) -> HookDiff:
    """Keep the modules that are `module` or below it (all if None). Unlike `select`, an empty
    `module` (the model's own path) keeps only the model, as `diff --module ''` always has."""
    if module is None:
        return diff
    return replace(diff, modules=tuple(item for item in diff.modules
                                       if in_module(item.module, module)))


def _keeps(event: LabelledEvent, module: str | None, hooks: Collection[HookKind]) -> bool:
    if hooks and event.hook not in hooks:
        return False
    if not module:
        return True
    if event.hook in MODULE_HOOKS:
        return in_module(event.target, module)
    if event.hook in TENSOR_HOOKS:
        return inside(event.target, module)
    return False
