"""Module paths: the dotted names a model's modules go by (`module2.l`, "" for the model
itself), and how a reader is shown one."""

from __future__ import annotations


def module_title(module: str) -> str:
    """How a module is named to a reader: its path, or `<model>` for the model itself."""
    return module if module else "<model>"


__all__ = ["module_title"]
