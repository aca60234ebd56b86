"""What a command's SPEC argument names: a YAML spec file, or a Python model (`file.py:name`,
`pkg.module:name`), and which files a Python model's module is read from. Plain text and path
rules, no torch and no import of the user's code: the command line decides before either."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from importlib.machinery import PathFinder
from pathlib import Path

TARGET = re.compile(r"^(?P<where>.+):(?P<attr>[^\W\d][\w.]*)$")
_MODULE = re.compile(r"^[^\W\d]\w*(\.[^\W\d]\w*)*$")


def is_python_target(text: str) -> bool:
    """Whether a command-line SPEC names Python (`file.py:name`, `pkg.mod:name`), not YAML."""
    match = TARGET.match(text)
    if match is None:
        return False
    where = match.group("where")
    return where.endswith(".py") or _MODULE.match(where) is not None


def names_python_model(text: str) -> bool:
    """Whether SPEC is taken for a Python model: it reads as one, and no file has that very
    name (`a:b.yaml` may be a spec file)."""
    return is_python_target(text) and not Path(text).is_file()


@contextlib.contextmanager
def working_directory_importable() -> Iterator[None]:
    """The working directory on sys.path while inside: a console script does not have it
    there, and `pkg.mod` in the directory the user stands in is what they mean."""
    added = "" not in sys.path and str(Path.cwd()) not in sys.path
    if added:
        sys.path.insert(0, str(Path.cwd()))
    try:
        yield
    finally:
        if added:
            sys.path.remove(str(Path.cwd()))


def module_files(where: str) -> tuple[Path, ...]:
    """The files importing the module `where` (`pkg.mod`) reads: each package's `__init__.py`
    on the way and the module's own file, as far as they are found; nothing is imported. They
    are found the way the path importer finds them (importlib.util.find_spec would import
    the parent packages first, running the user's code before an output is checked): a
    module only a custom import hook knows gives no file."""
    files: list[Path] = []
    search: list[str] | None = None  # None: sys.path
    parts = where.split(".")
    with working_directory_importable():
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            try:
                spec = PathFinder.find_spec(name, search)
            except (ImportError, OSError, ValueError):
                spec = None
            if spec is None:
                break
            if spec.has_location and spec.origin is not None:
                files.append(Path(spec.origin))
            if spec.submodule_search_locations is None:
                break
            search = list(spec.submodule_search_locations)
    return tuple(files)
