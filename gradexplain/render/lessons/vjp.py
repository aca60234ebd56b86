"""The vector-Jacobian-product lesson (records/lessons/vjp.py) as text and as markdown.

Both say the same things in the same order: the call and its seed v; what it computes (vᵀJ,
one number per element of the tensor differentiated with respect to, not the Jacobian J); J
where it is small; vᵀJ written as Σᵢ vᵢ·J[i]; for an output (batch, m) the per-sample blocks
and, for a seed of ones, the article's sum of the one-hot columns, or why there are no blocks
(e.g. the samples interact); then every identity checked.
Renderers return values and never print; numbers go through fmt. No torch here.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from gradexplain.records.lessons.vjp import Identity, JacobianMethod, VjpLesson
from gradexplain.records.names import Naming
from gradexplain.records.numbers import TEXT_ELEMENTS, fmt, fmt_shape, fmt_value
from gradexplain.records.trace import Nested, TensorValue
from gradexplain.render.latex import tensor_latex
from gradexplain.render.lessons.layout import Fitted, labelled, prose, prose_lines
from gradexplain.render.markdown import (
    blocks,
    bold,
    bullets,
    code,
    escape,
    heading,
    math,
    table,
)

# LaTeX written once here: f-string expressions cannot hold backslashes before Python 3.12.
VJP_LATEX = r"v^{\top} J"
SUM_LATEX = r"v^{\top} J = \sum_{i} v_{i} J_{i}"

# How many samples' m×n blocks are shown of a per-sample Jacobian.
SAMPLES_SHOWN = 3

METHODS: dict[JacobianMethod, str] = {
    "jacrev": "torch.func.jacrev of the forward as a function of the input, on a fresh build",
    "functional_call": "torch.func.jacrev through torch.func.functional_call, on a fresh build",
    "autograd": "batched torch.autograd.grad, one row per output element, on a fresh build",
}


# --- the words, shared by both renderers -------------------------------------------------------


def call_text(lesson: VjpLesson) -> str:
    """`y.backward(gradient=v)` or `torch.autograd.grad(pred, x_temp, grad_outputs=v)`."""
    if lesson.kind == "backward":
        return f"{lesson.of}.backward(gradient=v)"
    return f"torch.autograd.grad({lesson.of}, {lesson.wrt}, grad_outputs=v)"


def seed_text(lesson: VjpLesson) -> str:
    """What v is, in words (a literal one in full)."""
    shape = fmt_shape(lesson.seed.shape)
    if lesson.seed_kind == "ones":
        return f"v = ones of shape {shape}, the shape of {lesson.of}"
    if lesson.seed_kind == "one_hot":
        return (f"v = one-hot column {lesson.column}: a 1 in column {lesson.column} of every "
                f"row, 0 elsewhere, shape {shape}")
    what = "the gradient argument" if lesson.seed_kind == "gradient" else "grad_outputs"
    return f"v = {fmt_value(lesson.seed)}, {what}, shape {shape}"


def dims(shape: Sequence[int]) -> str:
    """`2×2`, `10×3×10×2`; `scalar` for no dimensions."""
    return "×".join(str(size) for size in shape) if shape else "scalar"


def meaning_text(lesson: VjpLesson) -> str:
    """The sentence the reader should take away: vᵀJ, not J."""
    verb = "backward(gradient=v)" if lesson.kind == "backward" else "autograd.grad(grad_outputs=v)"
    jacobian = dims(lesson.of_shape + lesson.wrt_shape)
    sentence = (f"{verb} computes vᵀJ, one number per element of {lesson.wrt}, not the Jacobian "
                f"J ({jacobian} here)")
    return sentence + _seed_meaning(lesson)


def _seed_meaning(lesson: VjpLesson) -> str:
    outputs = pymath.prod(lesson.of_shape)
    if lesson.per_sample is not None:
        batch, columns = lesson.of_shape
        block = dims(lesson.wrt_shape[1:])
        if lesson.seed_kind == "ones":
            return (f"; with v = ones it is the sum over the {columns} outputs of each output's "
                    f"gradient, not a ({batch}, {columns}, {block}) tensor of per-output "
                    "gradients")
        if lesson.seed_kind == "one_hot":
            return (f"; with v = one-hot column {lesson.column} it is output {lesson.column}'s "
                    f"gradient for every sample: row {lesson.column} of each sample's "
                    f"{columns}×{block} Jacobian block")
    elif lesson.seed_kind == "ones":
        return (f"; with v = ones it is the gradient of {lesson.of}.sum(), the sum of all "
                f"{outputs} outputs' gradients")
    return ""


def jacobian_text(lesson: VjpLesson) -> str:
    return f"J = ∂{lesson.of}/∂{lesson.wrt}: {jacobian_value_text(lesson)}"


def jacobian_value_text(lesson: VjpLesson) -> str:
    """J's shape and values, or why it is not shown."""
    if lesson.jacobian is None:
        size = dims(lesson.of_shape + lesson.wrt_shape)
        return f"{size}, too large to compute here: only vᵀJ is shown"
    if pymath.prod(lesson.jacobian.shape) > TEXT_ELEMENTS:
        return fmt_value(lesson.jacobian)  # a summary, which names the shape
    return f"shape {fmt_shape(lesson.jacobian.shape)}, {fmt_value(lesson.jacobian)}"


def result_source(lesson: VjpLesson) -> str:
    return (f"what backward adds to {lesson.wrt}.grad" if lesson.kind == "backward"
            else "what autograd.grad returns")


def result_text(lesson: VjpLesson) -> str:
    return (f"vᵀJ = {fmt_value(lesson.result)}, shape {fmt_shape(lesson.result.shape)} "
            f"({result_source(lesson)})")


def term_lines(lesson: VjpLesson) -> list[tuple[str, str, str, str]]:
    """(operator, vᵢ, J[i], output element) per term of Σᵢ vᵢ·J[i], then `=` and the sum."""
    lines = []
    for number, term in enumerate(lesson.rows):
        element = f"{lesson.of}[{', '.join(str(i) for i in term.output_index)}]"
        lines.append(("+" if number else " ", fmt(term.weight), fmt_value(term.row), element))
    return lines


def column_sum_text(lesson: VjpLesson) -> str | None:
    """The article's check, on this run's numbers: for v = ones, the first element of vᵀJ is the
    sum of the first elements of the one-hot columns' VJPs (0.1839 − 0.1607 + 0.1362 = 0.1594
    in the article)."""
    if lesson.per_sample is None or lesson.seed_kind != "ones":
        return None
    firsts = [_first(column) for column in lesson.per_sample.columns]
    total = _first(lesson.result)
    if total is None or any(item is None for item in firsts) or not firsts:
        return None
    sum_text = ""
    for number, item in enumerate(firsts):
        assert item is not None
        if number == 0:
            sum_text = fmt(item)
        else:
            sum_text += f" − {fmt(-item)}" if item < 0 else f" + {fmt(item)}"
    index = ", ".join("0" for _ in lesson.result.shape)
    return (f"vᵀJ[{index}] = {sum_text} = {fmt(total)}: element [{index}] of the "
            f"{len(firsts)} one-hot columns' VJPs, added (the article's 0.1839 − 0.1607 + "
            "0.1362 = 0.1594)")


def sample_blocks(lesson: VjpLesson) -> list[tuple[int, str]]:
    """The first SAMPLES_SHOWN samples' m×n blocks, formatted."""
    if lesson.per_sample is None or not isinstance(lesson.per_sample.jacobian.value, list):
        return []
    values = lesson.per_sample.jacobian.value
    return [(number, _nested(values[number])) for number in range(min(SAMPLES_SHOWN,
                                                                        len(values)))]


def per_sample_text(lesson: VjpLesson) -> str:
    assert lesson.per_sample is not None
    batch = lesson.of_shape[0]
    shown = min(SAMPLES_SHOWN, batch)
    return (f"per-sample Jacobians J_b = ∂{lesson.of}[b]/∂{lesson.wrt}[b], shape "
            f"{fmt_shape(lesson.per_sample.jacobian.shape)} (torch.func.vmap of "
            f"torch.func.jacrev over the batch); samples 0–{shown - 1} of {batch}:")


def identity_text(identity: Identity) -> str:
    return f"{identity.text}  (max abs error {fmt(identity.max_abs_err)})"


def _first(value: TensorValue) -> float | None:
    item: Nested | None = value.value
    while isinstance(item, list):
        if not item:
            return None
        item = item[0]
    return None if item is None else float(item)


def _nested(value: Nested) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_nested(item) for item in value) + "]"
    return fmt(value)


def _title(lesson: VjpLesson) -> str:
    number = lesson.call + 1  # the spec's own 1-based count, as "run 1" elsewhere
    return f"{lesson.kind} call {number}: {call_text(lesson)}, with respect to {lesson.wrt}"


def _intro(lessons: Sequence[VjpLesson]) -> str:
    if not lessons:
        return ("no backward call with a gradient and no autograd.grad call with grad_outputs: "
                "no vector-Jacobian product to explain")
    count = "1 call" if len(lessons) == 1 else f"{len(lessons)} calls"
    return (f"{count} with a seed vector v: each call seeds a non-scalar output "
            "with a vector v and gets back vᵀJ, never the Jacobian J itself")


# --- text --------------------------------------------------------------------------------------


def vjp_text(lessons: tuple[VjpLesson, ...]) -> RenderableType:
    """Every lesson as plain rich Text, laid out at the width it is printed at (layout.py)."""
    intro = _intro(lessons)
    parts: list[RenderableType] = [Text("vector-Jacobian products", style="bold underline"),
                                   Fitted(lambda width: prose(intro, width, "dim")), Text("")]
    for lesson in lessons:
        parts.append(_lesson_text(lesson))
    return Group(*parts)


def _lesson_text(lesson: VjpLesson) -> RenderableType:
    title = _title(lesson)
    lines: list[RenderableType] = [Fitted(lambda width: prose(title, width, "bold"))]

    def add(lay_out: Callable[[int], list[str]], style: str = "", indent: int = 2) -> None:
        # Padding, not leading spaces: lines are laid out in the room it leaves.
        lines.append(Padding(Fitted(lambda width: [Text(line, style=style)
                                                   for line in lay_out(width)]),
                             (0, 0, 0, indent)))

    def sentence(text: str, style: str = "", indent: int = 2) -> None:
        add(lambda width: prose_lines(text, width), style, indent)

    add(lambda width: _seed_lines(lesson, width))
    sentence(meaning_text(lesson), "italic")
    add(lambda width: _jacobian_lines(lesson, width))
    if lesson.jacobian_method is not None:
        sentence(f"(J from {METHODS[lesson.jacobian_method]})", "dim", 4)
    if lesson.rows:
        sentence(f"vᵀJ = Σᵢ vᵢ·J[i], one term per element of {lesson.of}:")
        add(lambda width: _term_lines(lesson, width), indent=4)
    add(lambda width: labelled("vᵀJ = ", lesson.result, f", shape "
                               f"{fmt_shape(lesson.result.shape)} ({result_source(lesson)})",
                               width))
    if lesson.per_sample is not None:
        sentence(per_sample_text(lesson))
        add(lambda width: _sample_lines(lesson, width), indent=4)
        summed = column_sum_text(lesson)
        if summed is not None:
            sentence(summed)
    elif lesson.per_sample_skipped is not None:
        sentence(lesson.per_sample_skipped, "dim")
    lines += [Padding(_identity_text(identity), (0, 0, 0, 2)) for identity in lesson.identities]
    lines.append(Text(""))
    return Group(*lines)


def _seed_lines(lesson: VjpLesson, width: int) -> list[str]:
    """`y [2], x [2]; v = [100, 0.1], the gradient argument, shape [2]`, a matrix seed one row
    per line."""
    shapes = (f"{lesson.of} {fmt_shape(lesson.of_shape)}, {lesson.wrt} "
              f"{fmt_shape(lesson.wrt_shape)}; ")
    if lesson.seed_kind in ("ones", "one_hot"):
        return prose_lines(shapes + seed_text(lesson), width)
    what = "the gradient argument" if lesson.seed_kind == "gradient" else "grad_outputs"
    return labelled(shapes + "v = ", lesson.seed,
                    f", {what}, shape {fmt_shape(lesson.seed.shape)}", width)


def _jacobian_lines(lesson: VjpLesson, width: int) -> list[str]:
    """`J = ∂y/∂x: shape [2, 2], [[3, 0], [0, 3]]`, J one row per line where it does not fit."""
    if lesson.jacobian is None or pymath.prod(lesson.jacobian.shape) > TEXT_ELEMENTS:
        return prose_lines(jacobian_text(lesson), width)
    return labelled(f"J = ∂{lesson.of}/∂{lesson.wrt}: shape {fmt_shape(lesson.jacobian.shape)}, ",
                    lesson.jacobian, "", width)


def _term_lines(lesson: VjpLesson, width: int) -> list[str]:
    """`+ 0.1 · [0, 3]   (y[1])` per term, then `= [300, 0.3]`: rows padded to line up when
    every term fits on a line that way, else each J[i] one matrix row per line."""
    terms = term_lines(lesson)
    weight_width = max(len(weight) for _, weight, _, _ in terms)
    heads = [f"{operator} {weight:>{weight_width}} · " for operator, weight, _, _ in terms]
    rows = [fmt_value(term.row) for term in lesson.rows]
    tails = [f"   ({element})" for _, _, _, element in terms]
    row_width = max(len(row) for row in rows)
    if all(len(head) + row_width + len(tail) <= width
           for head, tail in zip(heads, tails, strict=True)):
        # Aligned columns help short rows; rows wider than a line are not aligned.
        lines = [f"{head}{row:<{row_width}}{tail}" for head, row, tail in zip(heads, rows, tails,
                                                                              strict=True)]
    else:
        lines = [line for head, term, tail in zip(heads, lesson.rows, tails, strict=True)
                 for line in labelled(head, term.row, tail, width)]
    return lines + labelled("= ", lesson.result, "", width)


def _sample_lines(lesson: VjpLesson, width: int) -> list[str]:
    """`sample 0: [[...], [...]]` for the first samples, each block one row per line when it
    does not fit on one."""
    if lesson.per_sample is None:
        return []
    jacobian = lesson.per_sample.jacobian
    lines: list[str] = []
    for number, _ in sample_blocks(lesson):
        assert isinstance(jacobian.value, list)
        block = TensorValue(jacobian.shape[1:], jacobian.dtype, jacobian.value[number])
        lines += labelled(f"sample {number}: ", block, "", width)
    return lines


def _identity_text(identity: Identity) -> Fitted:
    """`✓ vᵀJ = Σᵢ vᵢ·J[i] (max abs error 0)`, the mark styled and kept with its words."""
    mark, style = ("✓", "green") if identity.verified else ("✗ FAILED", "bold red")

    def lay_out(width: int) -> list[Text]:
        lines = prose(f"{mark} {identity_text(identity)}", width)
        lines[0].stylize(style, 0, len(mark))
        return lines

    return Fitted(lay_out)


# --- markdown ----------------------------------------------------------------------------------


def vjp_markdown(lessons: tuple[VjpLesson, ...], level: int, naming: Naming) -> str:
    """Every lesson as GitHub markdown: a heading at `level`, one sub-heading per lesson."""
    parts = [heading(level, "Vector-Jacobian products"), escape(_intro(lessons), block=True)]
    if lessons:
        parts.append(_formula_markdown())
    for lesson in lessons:
        parts.append(_lesson_markdown(lesson, level + 1, naming))
    return blocks(*parts)


def _formula_markdown() -> str:
    return (f"For an output y and a seed v of y's shape, torch returns "
            f"{math(SUM_LATEX)}, where "
            f"{math(r'J_{i}')} is the row of the Jacobian for output element i: a weighted sum "
            "of rows, with the shape of the tensor differentiated with respect to.")


def _lesson_markdown(lesson: VjpLesson, level: int, naming: Naming) -> str:
    title = (f"{escape(lesson.kind)} call {lesson.call + 1}: {code(call_text(lesson))}, "
             "with respect to "
             f"{code(lesson.wrt)}")
    method = (f" (from {escape(METHODS[lesson.jacobian_method])})"
              if lesson.jacobian_method is not None else "")
    facts = [
        f"{code(lesson.of)} {code(fmt_shape(lesson.of_shape))}, {code(lesson.wrt)} "
        f"{code(fmt_shape(lesson.wrt_shape))}; {escape(seed_text(lesson))}",
        f"{math(_jacobian_latex(lesson, naming))}: "
        f"{escape(jacobian_value_text(lesson))}{method}",
        f"{math(VJP_LATEX)} = {code(fmt_value(lesson.result))}, shape "
        f"{code(fmt_shape(lesson.result.shape))} ({escape(result_source(lesson))})",
    ]
    parts = [heading(level, title), escape(meaning_text(lesson), block=True) + ".",
             bullets(facts)]
    terms = term_lines(lesson)
    if terms:
        rows = [[code(element), code(weight), code(row)] for _, weight, row, element in terms]
        rows.append([bold("sum"), "", code(fmt_value(lesson.result))])
        parts.append(f"{math(SUM_LATEX)}, term by term:")
        parts.append(table(["output element i", math("v_{i}"), math("J_{i}")], rows,
                           ["left", "right", "left"]))
    if lesson.per_sample is not None:
        parts.append(escape(per_sample_text(lesson), block=True))
        parts.append(table(["sample b", math("J_{b}")],
                           [[str(number), code(block)] for number, block in sample_blocks(lesson)],
                           ["right", "left"]))
        summed = column_sum_text(lesson)
        if summed is not None:
            value, _, words = summed.partition(": ")
            parts.append(f"{code(value)}: {escape(words)}.")
    elif lesson.per_sample_skipped is not None:
        parts.append(escape(lesson.per_sample_skipped, block=True) + ".")
    parts.append(table(["", "identity", "max abs error"],
                       [[_mark(identity), escape(identity.text), code(fmt(identity.max_abs_err))]
                        for identity in lesson.identities], [None, "left", "right"]))
    return blocks(*parts)


def _jacobian_latex(lesson: VjpLesson, naming: Naming) -> str:
    return (r"J = \frac{\partial " + tensor_latex(lesson.of, naming) + r"}{\partial "
            + tensor_latex(lesson.wrt, naming) + "}")


def _mark(identity: Identity) -> str:
    return "✓" if identity.verified else f"✗ {bold('FAILED')}"


__all__ = ["vjp_markdown", "vjp_text"]
