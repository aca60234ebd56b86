"""`diff --ranks N --format markdown` and the report's "Under DistributedDataParallel" / "Under
FSDP2" section: per rank its verdict, then per pass the calls the wrapping changed as a table
(both sides' labels, values and checks, and why), DDP's buckets, and each `.grad` after
backward. Returns a string."""

from __future__ import annotations

from collections import Counter

from gradexplain.records.check import Check
from gradexplain.records.distributed_diff import (
    ArgChange,
    BucketChange,
    CallChange,
    DistributedDiff,
    GradChange,
    PassChange,
    RankChange,
)
from gradexplain.records.numbers import fmt_value, shape_label
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import LabelledArg
from gradexplain.render.markdown import blocks, bold, code, escape, heading, math, table
from gradexplain.render.markdown_diff import prose
from gradexplain.render.marks import check_cell, value_cell

SINGLE = "one process"
KIND_MARKS = {"same": "=", "changed": "≠", "relabelled": "= (relabelled)",
              "silenced": "silenced", "added": "added"}
# The report's section titles, by wrapping (render/report.py).
SECTION_TITLES = {"ddp": "Under DistributedDataParallel", "fsdp": "Under FSDP2"}


def distributed_diff_markdown(diff: DistributedDiff, level: int = 1) -> str:
    """The whole diff; with `level` 1 it is a page of its own, deeper inside a report."""
    parts = []
    if level == 1:
        parts += [heading(1, f"One process vs {escape(diff.wrapper)}: {escape(diff.name)}"),
                  f"{code(diff.spec)}, torch {code(diff.torch)}"]
    parts.append(escape(
        f"Each rank's own walk in one process beside its walk under {diff.wrapper} "
        f"({diff.world_size} ranks), hook call by hook call: a call is matched by its hook, "
        "its target and how many such calls came before it. The calls the wrapping left "
        "alone are counted; every other one is shown with why."))
    parts += [_rank(diff, rank, level + 1) for rank in diff.ranks]
    return blocks(*parts)


def _rank(diff: DistributedDiff, rank: RankChange, level: int) -> str:
    inputs = ", ".join(f"{code(name)} = {value_cell(value)}" for name, value in rank.inputs)
    parts = [heading(level, f"Rank {rank.rank}")]
    if inputs:
        parts.append(f"Inputs: {inputs}.")
    parts.append(f"{bold('Verdict:')} {prose(rank.verdict)}")
    parts += [_pass(diff.wrapper, change) for change in rank.passes]
    return blocks(*parts)


def _pass(wrapper: str, change: PassChange) -> str:
    same = change.unchanged()
    counts = ", ".join(f"{code(hook)} {count}"
                       for hook, count in Counter(call.hook for call in same).items())
    about = escape(f"{change.single_calls} hook calls in one process, {change.wrapped_calls} "
                   f"under {wrapper}; {len(same)} with the same value and label")
    parts = [bold(escape(f"The {change.mode} pass")), about + (f" ({counts})." if counts
                                                                 else ".")]
    differing = change.differing()
    if differing:
        parts.append(table(["hook call", SINGLE, f"under {escape(wrapper)}", "", "why"],
                           [_call_row(wrapper, call) for call in differing]))
    if change.buckets:
        parts.append(table(["communication hook", "parameter", "handed over", "summed", "why"],
                           [row for bucket in change.buckets for row in _bucket_rows(bucket)]))
    parts.append(table([".grad after backward", SINGLE, f"under {escape(wrapper)}", "", "why"],
                       [_grad_row(grad) for grad in change.grads]))
    return blocks(*parts)


def _call_row(wrapper: str, call: CallChange) -> list[str]:
    user = f" ({code(call.user)})" if call.user else ""
    seqs = ", ".join(f"#{seq} {side}" for side, seq in (
        (SINGLE, call.single_seq), (f"under {wrapper}", call.wrapped_seq)) if seq is not None)
    title = (f"{code(call.hook)} {code(call.place)}{user}<br>"
             f"{escape(seqs)}")
    shown = [arg for arg in call.args
             if call.kind in ("silenced", "added") or not (arg.same_value and arg.same_label)]
    single = "<br>".join(_side(arg.name, arg.single, None) for arg in shown
                         if arg.single is not None) or "did not fire"
    wrapped = "<br>".join(_side(arg.name, arg.wrapped, arg) for arg in shown
                          if arg.wrapped is not None) or "did not fire"
    return [title, single, wrapped, KIND_MARKS[call.kind], prose(call.reason)]


def _side(name: str, arg: LabelledArg | None, change: ArgChange | None) -> str:
    """`name`: the label (or, where the distributed walk read the value as one, whose it
    is), the value and the check."""
    if arg is None or arg.value is None:
        return f"{code(name)}: None"
    label = math(arg.meaning.latex) if arg.meaning else escape("(not a derivative)")
    check: str = check_cell(arg.check, arg.not_checked)
    if change is not None and change.whose is not None and (
            arg.meaning is None or change.whose.scope != "local"):
        label = escape(change.whose.text)
        check = check_cell(change.whose_check, change.not_checked)
    return f"{code(name)}: {label}<br>{_value(arg.value, check)}"


def _value(value: TensorValue | None, check: str) -> str:
    if value is None:
        return "None"
    return f"{shape_label(value)}: {value_cell(value)}{' ' + check if check else ''}"


def _bucket_rows(change: BucketChange) -> list[list[str]]:
    rows = []
    for number, slot in enumerate(change.bucket.slots):
        first = number == 0
        rows.append([escape(f"bucket {change.bucket.index}, run {change.bucket.run}")
                     if first else "", code(slot.parameter),
                     _checked(slot.before, slot.before_check),
                     _checked(slot.after, slot.after_check),
                     prose(change.reason) if first else ""])
    return rows


def _checked(value: TensorValue | None, check: Check | None) -> str:
    mark = check_cell(check)
    return f"{code(fmt_value(value))}{' ' + mark if mark else ''}"


def _grad_row(grad: GradChange) -> list[str]:
    single = ("(none)" if grad.single is None
              else _value(grad.single.value, check_cell(grad.single.check)))
    wrapped = "(none)"
    if grad.wrapped is not None:
        check = check_cell(grad.wrapped.check, grad.wrapped.not_checked)
        wrapped = (f"{escape(grad.wrapped.whose.text)}<br>"
                   f"{_value(grad.wrapped.value, check)}")
    return [code(grad.name), single, wrapped, "≠" if grad.changed else "=",
            prose(grad.reason)]


__all__ = ["SECTION_TITLES", "distributed_diff_markdown"]
