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

    def text(self, *, collapse: bool = True) -> RenderableType:
        """The walk as `gradexplain walk` prints it (repeated blocks collapsed unless told)."""
        from gradexplain.render.text_walk import walk_text

        return walk_text(self.walk, collapse=collapse)

    def markdown(self) -> str:
        """The walk as `gradexplain walk --format markdown` prints it."""
        from gradexplain.render.markdown_walk import walk_markdown

        return walk_markdown(self.walk)

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
            max_values: int | None = PYTHON_VALUE_LIMIT, name: str | None = None,
            threads: int | None = DEFAULT_THREADS) -> Explanation:
    """Walk `model` on `inputs` with every hook: which derivative each hook argument is.

    `model` is an nn.Module or a zero-argument function returning one; each input is a tensor
    (copied; floating ones require grad) or a shape such as (4, 3), filled with seeded randn.
    `loss` is "sum" or "mean" of the output, the scalar backpropagated. Tensors above
    `max_values` elements are recorded as summaries. torch runs with `threads` intra-op
    threads (one by default, see `gradexplain.threads`; None keeps yours), and your setting is
    restored afterwards. Raises a GradexplainError subclass for bad input (its message says
    what to fix).
    """
    import torch

    from gradexplain.capture.pipeline import capture_module
    from gradexplain.capture.pymodel import InputShape, as_module, check_arity, random_inputs

    check_threads(threads, "explain(): threads=")
    title = name or getattr(model, "__name__", None) or type(model).__name__
    target = f"{title} (Python)"
    module = as_module(model, target)
    tensors: list[torch.Tensor] = []
    for index, item in enumerate(inputs):
        if isinstance(item, torch.Tensor):
            tensors.append(item)
        elif isinstance(item, (tuple, list)) and all(isinstance(size, int) for size in item):
            tensors += random_inputs([InputShape(tuple(item))], seed=index)
        else:
            raise UsageError(f"explain(): input {index} is a {type(item).__name__}; give a "
                             "tensor or a shape such as (4, 3)")
    check_arity(module, len(tensors), target)
    return Explanation(capture_module(module, tuple(tensors), target, loss, max_values, None,
                                      None, threads))


__all__ = ["Explanation", "explain"]
