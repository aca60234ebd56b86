"""The firing-order lesson (gradexplain/order.py) as text and as GitHub markdown.

Both show the same thing: every hook call of one backward or grad call, numbered, with the rule
that puts it there (a number into the legend, which gives each rule in full once), and a loud mark
where the observed order disagrees with its rule. Renderers return values, never print. No torch.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gradexplain.analysis.order import FiringOrder, OrderStep
from gradexplain.records.paths import module_title
from gradexplain.render.markdown import blocks, bold, bullets, code, escape, heading, table

ORDER_HEADERS = ("#", "hook", "on", "node", "rule")
OUT_OF_ORDER = "✗ out of order"


def order_text(order: FiringOrder) -> RenderableType:
    """A numbered timeline, one line per hook call, under a header line for each node's turn;
    then the legend."""
    numbers = _rule_numbers(order)
    width = {
        "position": len(str(len(order.steps))),
        "hook": max((len(step.hook) for step in order.steps), default=0),
        "target": min(max((len(_target(step)) for step in order.steps), default=0), 28),
        "node": min(max((len(_node(step)) for step in order.steps), default=0), 28),
    }
    lines: list[RenderableType] = [Text(_title(order), style="bold underline"),
                                   Text(_verdict(order),
                                        style="bold red" if order.out_of_order else "green")]
    turn = None
    for step in order.steps:
        if step.group != turn:
            turn = step.group
            lines.append(Text(f"{turn}'s turn", style="cyan"))
        line = Text.assemble(
            f"  {step.position:>{width['position']}}  ",
            (f"{step.hook:<{width['hook']}}", "bold"),
            f"  {_target(step):<{width['target']}}  {_node(step):<{width['node']}}  ",
            f"rule {numbers[step.rule]:<2} ",
        )
        line.append_text(Text("✓", style="green") if step.holds
                         else Text(OUT_OF_ORDER, style="bold red"))
        lines.append(line)
    lines += [Text(""), Text("rules", style="bold"), _legend_text(order, numbers)]
    return Group(*lines)


def order_markdown(order: FiringOrder, level: int) -> str:
    """A heading at `level`, a table with one row per hook call, the legend as bullets."""
    numbers = _rule_numbers(order)
    rows = [
        [str(step.position), code(step.hook), _target_markdown(step), code(step.group),
         f"rule {numbers[step.rule]} " + ("✓" if step.holds else bold(escape(OUT_OF_ORDER)))]
        for step in order.steps
    ]
    legend = [f"rule {number}: {escape(rule)}" for rule, number in numbers.items()]
    return blocks(
        heading(level, escape(_title(order))),
        escape(_verdict(order) + ". The node column says whose turn a hook call belongs to: "
               "the autograd node it runs on, or for a leaf its AccumulateGrad node.", block=True),
        table(ORDER_HEADERS, rows, ["right", None, None, None, None]),
        bold("Rules"),
        bullets(legend),
    )


def _title(order: FiringOrder) -> str:
    return f"Firing order: {order.mode} pass, run {order.run}"


def _verdict(order: FiringOrder) -> str:
    total = len(order.steps)
    wrong = len(order.out_of_order)
    if not wrong:
        return f"{total} hook calls, each one where its rule puts it"
    return f"{wrong} of {total} hook calls out of order (marked {OUT_OF_ORDER})"


def _rule_numbers(order: FiringOrder) -> dict[str, int]:
    numbers = {rule: number for number, rule in enumerate(order.rules, start=1)}
    # A step's rule is always in the legend when firing_order built it; a hand-made one may not
    # be, and still gets a number rather than breaking the page.
    for step in order.steps:
        numbers.setdefault(step.rule, len(numbers) + 1)
    return numbers


def _legend_text(order: FiringOrder, numbers: dict[str, int]) -> RenderableType:
    legend = Table.grid(padding=(0, 1))
    legend.add_column(no_wrap=True, justify="right")
    legend.add_column()
    for rule, number in numbers.items():
        legend.add_row(f"  {number}", rule)
    return legend


def _target(step: OrderStep) -> str:
    return module_title(step.target)


def _target_markdown(step: OrderStep) -> str:
    return code(step.target) if step.target else escape(module_title(""))


def _node(step: OrderStep) -> str:
    if step.node is None:
        return "-"
    return step.node.removeprefix("torch::autograd::")


__all__ = ["order_markdown", "order_text"]
