"""The Python API: `gradexplain.explain(model, *inputs)` for notebooks and scripts. It runs the
same pipeline as `gradexplain walk FILE.py:NAME` (`capture.pipeline.capture_module`).

    >>> from gradexplain import explain
    >>> result = explain(model, torch.randn(4, 3))          # doctest: +SKIP
    >>> result.failures()                                   # doctest: +SKIP
    []
    >>> rich.print(result.text())                           # doctest: +SKIP

The model is deep-copied for every run, so the caller's model gets no hooks and no `.grad`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradexplain.errors import UsageError
from gradexplain.records.session import Session
from gradexplain.records.trace import PYTHON_VALUE_LIMIT
from gradexplain.threads import DEFAULT_THREADS, check_threads

if TYPE_CHECKING:
    import torch
    from rich.console import RenderableType
    from torch import nn

    from gradexplain.records.diff import HookDiff
    from gradexplain.records.pinned import PinnedView
    from gradexplain.records.walk import Failure, Walk

@dataclass(frozen=True)
class Explanation:
    """What `gradexplain walk` computes for a model (the captured session), rendered on demand:
    `text()` a rich renderable, `markdown()` a string, `json()` a dict, `report()` a page."""

    session: Session

    @property
    def walk(self) -> Walk:
        return self.session.walk

    def failures(self) -> list[Failure]:
        """Every check that failed (empty when every label held)."""
        return self.walk.failures()

    def text(self, *, collapse: bool = True, timeline: bool = False) -> RenderableType:
        """The walk as `gradexplain walk` prints it (repeated blocks collapsed unless told;
        the passes' timelines with `timeline`, as `--timeline`)."""
        from gradexplain.render.text_walk import walk_text

        return walk_text(self.walk, self._view(), collapse=collapse, timeline=timeline)

    def markdown(self) -> str:
        """The walk as `gradexplain walk --format markdown` prints it."""
        from gradexplain.render.markdown_walk import walk_markdown

        return walk_markdown(self.walk, self._view())

    def _view(self) -> PinnedView:
        from gradexplain.analysis.pinned import session_view

        return session_view(self.session, self.walk, None, ())

    def json(self) -> dict[str, Any]:
        """The walk as `gradexplain walk --format json` prints it (schema gradexplain.walk/1)."""
        from gradexplain.render.json_walk import walk_json

        return walk_json(self.walk)

    def diff(self) -> HookDiff:
        """Legacy vs full hooks, module by module, as `gradexplain diff` computes it."""
        from gradexplain.analysis.diff import compare

        return compare(self.session)

    def report(self) -> str:
        """The markdown page `gradexplain report` writes."""
        from gradexplain.pages import report_page

        return report_page(self.session)

    def save(self, path: str | Path) -> None:
        """Save the session, for `gradexplain walk --load FILE` (and diff, report)."""
        from gradexplain.records.session import save_session

        save_session(self.session, Path(path))

    def __rich__(self) -> RenderableType:
        return self.text()

    def _repr_markdown_(self) -> str:
        return self.markdown()


def explain(model: nn.Module | Any, *inputs: torch.Tensor | Sequence[int], loss: str = "sum",
            output: str | int | Sequence[str | int] | None = None,
            requires_grad: bool | Sequence[bool] | None = None,
            max_values: int | None = PYTHON_VALUE_LIMIT, name: str | None = None,
            threads: int | None = DEFAULT_THREADS) -> Explanation:
    """Walk `model` on `inputs` with every hook: which derivative each hook argument is.

    `model` is an nn.Module or a zero-argument function returning one; each input is a tensor
    (copied) or a shape such as (4, 3), filled with seeded randn. A tensor requires grad as
    given, a shape-made floating input does; `requires_grad` overrides that: True (every
    floating input), False (none), or one bool per input. `loss` is "sum" or "mean" of the
    output, the scalar backpropagated; for a tuple, nested or dict output, `output` picks the
    part it is taken of (the CLI's --loss-of): an index or key (`0`, `"logits"`), a dotted path
    (`"1.0"` is output[1][0]) or a sequence of parts (`(1, 0)`); without it, every floating
    tensor of the output that requires grad is reduced and the results added. Tensors above
    `max_values` elements are recorded as summaries. torch runs with `threads` intra-op
    threads (one by default, see `gradexplain.threads`; None keeps yours), and your setting is
    restored afterwards. Raises a GradexplainError subclass for bad input (its message says
    what to fix).
    """
    import torch

    from gradexplain.capture.pipeline import capture_module
    from gradexplain.capture.pymodel import InputShape, as_module, check_arity, random_inputs

    check_threads(threads, "explain(): threads=")
    path = _output_path(output)
    title = name or getattr(model, "__name__", None) or type(model).__name__
    target = f"{title} (Python)"
    module = as_module(model, target)
    tensors: list[torch.Tensor] = []
    given: list[bool] = []
    for index, item in enumerate(inputs):
        if isinstance(item, torch.Tensor):
            tensors.append(item)
            given.append(item.requires_grad)
        elif isinstance(item, (tuple, list)) and all(isinstance(size, int) for size in item):
            _check_shape(index, tuple(item))
            tensors += random_inputs([InputShape(tuple(item))], seed=index)
            given.append(True)
        else:
            kind = type(item).__name__
            article = "an" if kind[:1].lower() in "aeiou" else "a"
            raise UsageError(f"explain(): input {index} is {article} {kind}; give a "
                             "tensor or a shape such as (4, 3)")
    check_arity(module, len(tensors), target)
    grads = _requires_grad(requires_grad, given, tensors)
    return Explanation(capture_module(module, tuple(tensors), target, loss, max_values, None,
                                      None, threads, output=path, requires_grad=grads))


def _check_shape(index: int, shape: tuple[int, ...]) -> None:
    """A shape given for input `index`: positive sizes, within the CLI's bound on elements (a
    negative size is torch's RuntimeError in randn, a typo the caller should hear about)."""
    from gradexplain.capture.pymodel import check_elements

    if any(isinstance(size, bool) or size <= 0 for size in shape):
        raise UsageError(f"explain(): input {index} is the shape {shape}; every size must be a "
                         "positive integer")
    check_elements(f"explain(): input {index} is the shape {shape}", math.prod(shape))


def _output_path(output: str | int | Sequence[str | int] | None) -> tuple[str, ...]:
    """explain()'s `output=` as an OutputPath: a dotted string, an index, or a sequence."""
    from gradexplain.output_path import WHOLE, parse_output_path

    if output is None:
        return WHOLE
    if isinstance(output, bool) or not isinstance(output, (str, int, tuple, list)):
        raise UsageError(f"explain(): output={output!r}: give an index, a key, a dotted path "
                         "such as '1.0', or a tuple of parts")
    if isinstance(output, str):
        return parse_output_path(output, "explain(): output=")
    parts = (output,) if isinstance(output, int) else tuple(output)
    if not parts or not all(isinstance(part, (str, int)) and not isinstance(part, bool)
                            and str(part) and "." not in str(part) for part in parts):
        raise UsageError(f"explain(): output={output!r}: each part is an index or a key "
                         "without dots")
    return tuple(str(part) for part in parts)


def _requires_grad(option: bool | Sequence[bool] | None, given: list[bool],
                   tensors: list[torch.Tensor]) -> list[bool]:
    """Which inputs require grad: as given (None), every floating one (True), none (False),
    or one bool per input."""
    if option is None:
        return given
    if isinstance(option, bool):
        return [option and tensor.is_floating_point() for tensor in tensors]
    chosen = list(option)
    if len(chosen) != len(tensors) or not all(isinstance(item, bool) for item in chosen):
        raise UsageError(f"explain(): requires_grad={option!r}: give True, False or one bool "
                         f"per input ({len(tensors)})")
    return chosen


__all__ = ["Explanation", "explain"]
