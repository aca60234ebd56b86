"""`diff --ranks N --format text`: each rank's single-process walk beside its walk under DDP or
FSDP2, pass by pass: the calls the wrapping left alone counted by hook kind, every other call
with both sides' labels, values and why, DDP's buckets, each `.grad` after backward, and the
rank's verdict. Returns a rich renderable; `cli.py` prints it.

Laid out by hand, as text_diff.py is: every line is a `Text` made for the width (at most
WIDTH columns), so a pipe gets the same characters from `plain.py` without rich's layout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.text import Text

from gradexplain.records.distributed_diff import (
    ArgChange,
    BucketChange,
    CallChange,
    DistributedDiff,
    GradChange,
    PassChange,
    RankChange,
)
from gradexplain.records.numbers import fmt_shape, fmt_value
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import LabelledArg
from gradexplain.render.console import title_line
from gradexplain.render.fit import value_lines, word_lines
from gradexplain.render.marks import check_mark

WIDTH = 100  # the most columns a line takes, however wide the terminal
SINGLE = "one process"


def distributed_diff_text(diff: DistributedDiff) -> RenderableType:
    about = word_lines(f"one process against {diff.wrapper}, {diff.world_size} ranks: each "
                       "rank's own walk beside its walk under the wrapping, hook by hook", WIDTH)
    return Group(
        title_line(diff.name, diff.spec, diff.torch),
        *(Text(line, style="dim") for line in about),
        Text(""),
        *(RankLines(diff, rank) for rank in diff.ranks))


class RankLines:
    """One rank's part: its inputs and verdict, then each pass."""

    def __init__(self, diff: DistributedDiff, rank: RankChange) -> None:
        self.diff = diff
        self.rank = rank

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        yield from self.text_lines(options.max_width)

    def text_lines(self, width: int) -> Iterator[Text]:
        """The lines at `width` (at most WIDTH), for rich or `plain.py`."""
        lines = _Lines(min(width, WIDTH), self.diff.wrapper)
        rank = self.rank
        inputs = ", ".join(f"{name} = {fmt_value(value)}" for name, value in rank.inputs)
        lines.add(0, f"rank {rank.rank}" + (f"  inputs: {inputs}" if inputs else ""),
                  "bold cyan")
        lines.prose(2, f"verdict: {rank.verdict}", "bold")
        for change in rank.passes:
            lines.passed(change)
        lines.add(0, "")
        return iter(lines.lines)


class _Lines:
    """The lines of one rank, built up part by part."""

    def __init__(self, width: int, wrapper: str) -> None:
        self.width = width
        self.wrapper = wrapper
        self.lines: list[Text] = []

    def add(self, indent: int, text: str, style: str = "") -> None:
        line = Text(" " * indent)
        line.append(text, style=style or None)
        line.highlight_words(["✓"], "green")
        line.highlight_words(["✗"], "bold red")
        line.no_wrap = True
        self.lines.append(line)

    def prose(self, indent: int, text: str, style: str = "") -> None:
        for part in word_lines(text, self.width - indent, 2):
            self.add(indent, part, style)

    def passed(self, change: PassChange) -> None:
        same = change.unchanged()
        self.add(2, f"{change.mode} pass: {change.single_calls} hook calls in one process, "
                 f"{change.wrapped_calls} under {self.wrapper}", "bold")
        if same:
            counts = Counter(call.hook for call in same)
            kinds = ", ".join(f"{hook} {count}" for hook, count in counts.items())
            self.prose(4, f"the same value and label: {len(same)} calls ({kinds})")
        for call in change.differing():
            self.call(call)
        for bucket in change.buckets:
            self.bucket(bucket)
        self.add(4, ".grad after backward", "bold")
        for grad in change.grads:
            self.grad(grad)

    def call(self, call: CallChange) -> None:
        user = f" ({call.user})" if call.user else ""
        seqs = ", ".join(f"{side} #{seq}" for side, seq in (
            (SINGLE, call.single_seq), (f"under {self.wrapper}", call.wrapped_seq))
            if seq is not None)
        self.add(4, f"{call.kind:<11}{call.hook} {call.place}{user}  "
                 f"{seqs}", "yellow")
        for arg in call.args:
            if call.kind == "relabelled":
                if not arg.same_label:
                    self.relabelled(arg)
            elif not (call.kind == "changed" and arg.same_value and arg.same_label):
                self.arg(arg)
        self.prose(6, f"why: {call.reason}")

    def relabelled(self, arg: ArgChange) -> None:
        """`name  label ✓ → label ✓`, then the value, the same on both sides."""
        sides = [f"{_label(item)} {check_mark(item.check, item.not_checked).plain}".rstrip()
                 for item in (arg.single, arg.wrapped) if item is not None]
        self.prose(6, f"{arg.name}  {' → '.join(sides)}")
        self.value(8, "both: ", arg.wrapped.value if arg.wrapped is not None else None)

    def value(self, indent: int, head: str, value: TensorValue | None, check: str = "") -> None:
        """`head` and the value, a matrix row a line where the whole does not fit, a summary
        where a row does not (`fit.value_lines`, which names the shape); ✓ after the last
        line, anything longer (a failure, why there is no check) on a line of its own."""
        shape = "" if value is None else (fmt_shape(value.shape) if value.shape else "scalar")
        mark = check if check == "✓" else ""
        lines = value_lines(value, self.width - indent - len(head) - len(shape) - 4)
        if value is not None and not lines[0].startswith(fmt_shape(value.shape) + " "):
            head = f"{head}{shape}: "
        for index, line in enumerate(lines):
            last = index == len(lines) - 1
            self.add(indent, (head if index == 0 else " " * len(head)) + line
                     + (f" {mark}" if last and mark else ""))
        if check and not mark:
            self.prose(indent + len(head), check, "bold red" if "✗" in check else "yellow")

    def arg(self, arg: ArgChange) -> None:
        self.add(6, arg.name)
        for side, item in ((SINGLE, arg.single), (self.wrapper, arg.wrapped)):
            if item is None:
                continue
            label = _label(item)
            check = check_mark(item.check, item.not_checked).plain
            if side == self.wrapper and arg.whose is not None and (
                    item.meaning is None or arg.whose.scope != "local"):
                label = arg.whose.text
                check = check_mark(arg.whose_check, arg.not_checked).plain
            self.side(side, f"{label} {check}".rstrip(), item.value)

    def side(self, side: str, label: str | None, value: TensorValue | None,
             check: str = "") -> None:
        """`side  label`, then the value under it (or beside the side, without a label)."""
        head = f"{side:<{max(len(SINGLE), len(self.wrapper))}}  "
        if label is not None:
            for index, part in enumerate(word_lines(label, self.width - 8 - len(head))):
                self.add(8, (head if index == 0 else " " * len(head)) + part)
            head = " " * len(head)
        self.value(8, head, value, check)

    def bucket(self, change: BucketChange) -> None:
        bucket = change.bucket
        self.add(4, f"{'added':<11}communication hook, bucket {bucket.index}", "yellow")
        for slot in bucket.slots:
            self.add(6, slot.parameter)
            self.value(8, "handed over ", slot.before, check_mark(slot.before_check).plain)
            self.value(8, "summed      ", slot.after, check_mark(slot.after_check).plain)
        self.prose(6, f"why: {change.reason}")

    def grad(self, grad: GradChange) -> None:
        self.add(6, f"{grad.name}  {'≠' if grad.changed else '='}")
        if grad.single is not None:
            self.side(SINGLE, None, grad.single.value)
        if grad.wrapped is not None:
            check = check_mark(grad.wrapped.check, grad.wrapped.not_checked).plain
            label = grad.wrapped.whose.text if grad.changed else None
            self.side(self.wrapper, label, grad.wrapped.value, check)
        if grad.reason:
            self.prose(8, f"why: {grad.reason}")


def _label(arg: LabelledArg) -> str:
    if arg.value is None:
        return "None"
    return arg.meaning.text if arg.meaning is not None else "(not a derivative)"


__all__ = ["WIDTH", "distributed_diff_text"]
