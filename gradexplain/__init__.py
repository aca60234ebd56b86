"""gradexplain: which derivative is this hook argument?

The package root stays import-light on purpose: `gradexplain --help` and `gradexplain validate` must
not import torch, so nothing here pulls in the builder or tracer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# What explain() raises: errors.py imports nothing heavy, so it comes with the package root.
from gradexplain.errors import GradexplainError

if TYPE_CHECKING:
    from gradexplain.api import Explanation, explain

__version__ = "0.1.0"

__all__ = ["Explanation", "GradexplainError", "__version__", "explain"]


def __getattr__(name: str) -> object:
    # `gradexplain.explain` without importing torch for `gradexplain --help`: the API module
    # (and torch with it) loads on first use.
    if name in ("explain", "Explanation"):
        from gradexplain import api

        return getattr(api, name)
    raise AttributeError(f"module 'gradexplain' has no attribute {name!r}")
