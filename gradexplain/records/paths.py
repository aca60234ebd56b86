"""Module paths: the dotted names a model's modules go by (`module2.l`, "" for the model
itself), and the one rule for whether a module or a tensor belongs to another module. Every
`--module` filter (the walk's events, the diff's modules) asks `in_module` or `inside`."""

from __future__ import annotations


def inside(name: str, module: str) -> bool:
    """Whether `name` is strictly below `module`: `module2.l` and `module2.t` are inside
    `module2`, `module20` is not (a bare prefix is no path)."""
    return name.startswith(module + ".")


def in_module(path: str, module: str) -> bool:
    """Whether the module at `path` is `module` or one of its submodules."""
    return path == module or inside(path, module)


def module_title(module: str) -> str:
    """How a module is named to a reader: its path, or `<model>` for the model itself."""
    return module if module else "<model>"


__all__ = ["in_module", "inside", "module_title"]
