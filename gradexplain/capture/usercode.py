"""The user's own Python at its edges: whatever it raises (or exits with) said in one bounded line.

A Python model (`walk models.py:make_model`) runs the user's code by their choice: at import,
in the factory, in every forward (two passes, the probe and the check run), in their hooks, in
`repr(model)` and `copy.deepcopy(model)`. Any of it may raise anything: an exception whose
`__str__` raises, a megabyte-long message, `sys.exit(3)`, a `BaseException` subclass such as
`GeneratorExit`. This module owns saying that in one line of bounded length, with where in the
user's file it happened, so that the command line can exit 2 instead of passing the user's exit
code on or printing "internal error". `KeyboardInterrupt` is never caught here: Ctrl-C stays
the user's way out (exit 130).
"""

from __future__ import annotations

import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

import gradexplain
from gradexplain.errors import GradexplainError, ModelRunError

# What a message quotes of the user's text: the first line, cut to this many characters.
MESSAGE_LIMIT = 200

# Frames in these folders are not the user's: gradexplain, torch and Python's own library.
_TORCH = str(Path(torch.__file__).parent.resolve())
_OURS = str(Path(gradexplain.__file__).parent.resolve())
_NOT_USER = (_OURS, _TORCH, str(Path(sysconfig.get_paths()["stdlib"]).resolve()))


def caught(error: BaseException) -> bool:
    """Whether an exception from user code is turned into a one-line error: anything but
    Ctrl-C (exit 130 as always) and gradexplain's own errors (already one line)."""
    return not isinstance(error, (KeyboardInterrupt, GradexplainError))


def cut(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """The first line of `text`, at most `limit` characters, control characters escaped (the
    user's text must not drive the terminal the error line is printed on)."""
    stripped = text.strip()
    line = stripped.splitlines()[0] if stripped else ""
    shown = line if len(line) <= limit else line[:limit] + "..."
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in shown)


def message_of(error: BaseException) -> str:
    """The first line of the exception's message, cut; never raises, whatever its __str__
    does (an unprintable message is said to be one)."""
    try:
        text = str(error)
    except Exception as failure:  # the user's __str__ raised: say so rather than crash
        return f"(its message cannot be shown: its __str__ raised {type(failure).__name__})"
    return cut(text)


def described(error: BaseException) -> str:
    """`raised ValueError: expected 3 features`, `raised SystemExit(3)` (sys.exit): what the
    user's code did, for `f"{target}: its forward {described(error)}"`."""
    if isinstance(error, SystemExit):
        code = error.code
        shown = cut(_safe_repr(code), 60)
        return f"raised SystemExit({'' if code is None else shown})"
    name = type(error).__name__
    message = message_of(error)
    return f"raised {name}: {message}" if message else f"raised {name}"


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return type(value).__name__


def user_frame(error: BaseException) -> str | None:
    """`in forward, models.py:12`: the innermost place in the user's own files the exception
    went through (not gradexplain, torch or Python's library), or None if it never did."""
    found: str | None = None
    trace: TracebackType | None = error.__traceback__
    while trace is not None:
        code = trace.tb_frame.f_code
        if _is_users(code.co_filename):
            found = cut(f"in {code.co_name}, {Path(code.co_filename).name}:{trace.tb_lineno}")
        trace = trace.tb_next
    return found


def raised_by_us(error: BaseException) -> bool:
    """Whether, of the frames in the user's files and in gradexplain's, the innermost is ours:
    our own hook failing inside the user's forward is our bug, not the model's, even though
    the exception went through the user's file on its way out."""
    ours = False
    trace: TracebackType | None = error.__traceback__
    while trace is not None:
        filename = trace.tb_frame.f_code.co_filename
        if _is_users(filename):
            ours = False
        elif _resolved(filename).startswith(_OURS):
            ours = True
        trace = trace.tb_next
    return ours


def _is_users(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen runpy>, <string>: not a file the user can open
        return False
    resolved = _resolved(filename)
    return bool(resolved) and not resolved.startswith(_NOT_USER)


def _resolved(filename: str) -> str:
    try:
        return str(Path(filename).resolve())
    except (OSError, RuntimeError):
        return ""


def with_place(text: str, error: BaseException) -> str:
    """`text`, then where in the user's files it happened, when that is known."""
    place = user_frame(error)
    return f"{text} ({place})" if place else text


def not_a_tensor_returned(error: BaseException,
                          model: torch.nn.Module) -> tuple[str, str] | None:
    """When torch's legacy backward hook code failed on a module's result that holds no tensor
    (`var = var[0]` on None), which module (its path, "" for the model) returned what (`None`,
    `an int`). None for any other error."""
    trace: TracebackType | None = error.__traceback__
    while trace is not None:
        frame = trace.tb_frame
        local = frame.f_locals
        # The failure is this frame's own (`var = var[0]` raised here, the innermost frame),
        # on a result that holds no tensor: an error raised further in (a warning turned into
        # an error by the user's filter) is not about what the module returned.
        if ("non_full_backward_hooks" in local and "var" in local and "result" in local
                and trace.tb_next is None and not isinstance(local["result"], torch.Tensor)
                and str(Path(frame.f_code.co_filename).resolve()).startswith(_TORCH)):
            module = local.get("self")
            path = "" if module is model else next(
                (name for name, item in model.named_modules() if item is module),
                type(module).__name__)
            result = local["result"]
            kind = kind_of(result)
            return (path, kind)
        trace = trace.tb_next
    return None


def with_article(noun: str) -> str:
    """`a str`, `an int`: a type's name as a message says it."""
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def kind_of(value: object) -> str:
    """What a value is, as a message says it: `None`, `a str`, `an int`."""
    return "None" if value is None else with_article(type(value).__name__)


def safe_repr(model: torch.nn.Module) -> str:
    """`repr(model)` for the report's description; if the user's `__repr__` or `extra_repr`
    fails (or exits), the class name and a short note instead: a description is no reason to
    stop the walk."""
    try:
        text = repr(model)
    except BaseException as error:
        if not caught(error):
            raise
        return f"{type(model).__name__}(...)  # repr(model) {described(error)}"
    return text if isinstance(text, str) else type(model).__name__


class Stage:
    """Which stage of the capture user code is running in, for the message (`legacy pass`):
    `track` passes each stage on to the caller's progress callback and remembers it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def track(self, progress: Callable[[str], None] | None) -> Callable[[str], None]:
        def told(stage: str) -> None:
            self.name = stage
            if progress is not None:
                progress(stage)
        return told


@contextmanager
def blamed_on_user(target: str, stage: str = "loading of the model") -> Iterator[Stage]:
    """Within the block, an exception that went through the user's own files (a hook, a
    `__deepcopy__`) or is no Exception at all (`sys.exit`, `GeneratorExit`) becomes one
    ModelRunError saying what, in which stage and where; anything else is ours and goes on
    up (an internal error to report)."""
    current = Stage(stage)
    try:
        yield current
    except BaseException as error:
        if not caught(error) or (isinstance(error, Exception)
                                 and (user_frame(error) is None or raised_by_us(error))):
            raise
        place = user_frame(error)
        raise ModelRunError(f"{target}: the model's code {described(error)} (during the "
                            f"{current.name}{'; ' + place if place else ''})") from error


__all__ = ["MESSAGE_LIMIT", "Stage", "blamed_on_user", "caught", "cut", "described", "kind_of",
           "message_of", "not_a_tensor_returned", "raised_by_us", "safe_repr", "user_frame",
           "with_article", "with_place"]

