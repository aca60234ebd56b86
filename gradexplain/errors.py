"""The project's errors: one base class, small subclasses, each turned into one line by the CLI.

Every error knows its exit code (DESIGN section 1, contract): 2 for bad input, 1 for a problem the
run found. Spec errors also know where in the YAML file they come from, so the message can name the
file, the line:column and the key path.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """A place in a spec file: 1-based line and column, and the key path that leads there."""

    file: str
    line: int | None = None
    column: int | None = None
    path: tuple[str | int, ...] = ()

    def key_path(self) -> str:
        """The path as a reader writes it: `modules.module2.layers.l`, `forward[1]`."""
        text = ""
        for part in self.path:
            if isinstance(part, int):
                text += f"[{part}]"
            elif not part.isprintable() or len(part) > 60:
                # A key with a newline or a control character would break the one-line error.
                text += f"[{quoted(part)}]"
            else:
                text += f".{part}" if text else part
        if len(text) > 80:
            # 64 levels of [0] say no more than their two ends do.
            text = f"{text[:40]}...{text[-30:]}"
        return text

    def shifted(self, columns: int) -> Location:
        """The same place moved right, to point inside a scalar (a token inside a step)."""
        if self.column is None:
            return self
        return Location(self.file, self.line, self.column + columns, self.path)

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where


def quoted(text: str, limit: int = 60) -> str:
    """User text as a message quotes it: repr'd (so control characters show as escapes), and
    cut to `limit` characters, so a 1,000-character step does not make a 1,000-character error."""
    return repr(text) if len(text) <= limit else repr(text[:limit])[:-1] + "...'"


def show_number(value: float, exact_below: int = 10**15) -> str:
    """A number as a message quotes it: a 400-digit integer is shown by its size, not in full
    ("got 12", "got a 400-digit number"); an integer below `exact_below` in size in full (an
    int64 bound needs its 19 digits)."""
    if isinstance(value, int) and abs(value) >= exact_below:
        if abs(value).bit_length() > 14_000:
            # str() of an int over 4,300 digits raises (Python's guard against slow conversions).
            return f"a number of about {int(abs(value).bit_length() * 0.30103):,} digits"
        digits = len(str(abs(value)))
        if value < 0:
            return f"a negative {digits}-digit number"
        # "an 18-digit", "an 80-digit": said "eighteen", "eighty".
        return f"{'an' if digits == 18 or str(digits)[0] == '8' else 'a'} {digits}-digit number"
    return f"{value:,}" if isinstance(value, int) else str(value)


def the_number(value: float) -> str:
    """A number as the subject of a sentence: "the number 12", "a 400-digit number"."""
    shown = show_number(value)
    return shown if shown.startswith(("a ", "an ")) else f"the number {shown}"


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (torch's run on), or its repr if it has none;
    its type's name if its __str__ or __repr__ raises (the user's own exceptions may)."""
    try:
        text = str(error).strip()
        return first_line_of(text) if text else repr(error)
    except Exception:
        return type(error).__name__


def first_line_of(text: str) -> str:
    """The first line of a message, or the message itself if it has no line."""
    lines = text.strip().splitlines()
    return lines[0] if lines else text


class GradexplainError(Exception):
    """Base of every error the tool reports on purpose. `exit_code` follows DESIGN section 1."""

    exit_code = 1

    def one_line(self) -> str:
        return str(self)


class BadInput(GradexplainError):
    """The user's input (a spec, an option) cannot be used: exit 2."""

    exit_code = 2


class UsageError(BadInput):
    """A command-line option or argument that cannot be used (a missing file, a bad flag value)."""


class OutputError(BadInput):
    """The output cannot be written where it goes (stdout on a full disk): exit 2, one line."""


class SpecError(BadInput):
    """A spec that cannot be used, with the place in the file that says why."""

    kind = "spec error"

    def __init__(self, message: str, where: Location | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def one_line(self) -> str:
        if self.where is None:
            return f"{self.kind}: {self.message}"
        path = self.where.key_path()
        at = f" at {path}" if path else ""
        return f"{self.where}: {self.kind}{at}: {self.message}"

    def __str__(self) -> str:
        return self.one_line()


class SpecSyntaxError(SpecError):
    """The file is not YAML, is empty, or is not a mapping."""

    kind = "YAML error"


class SpecFileError(SpecError):
    """A spec file that cannot be read at all: missing, a folder, not readable. The message
    says which, after the file's name; it is no YAML error, since no YAML was read."""

    kind = "cannot read the spec"

    def one_line(self) -> str:
        return f"{self.where.file}: {self.message}" if self.where else self.message


class SpecSchemaError(SpecError):
    """A key that does not belong, a missing key, or a value of the wrong type."""

    kind = "schema error"


class SpecNameError(SpecError):
    """An undefined name, a name defined twice, a reserved name, or steps that form a cycle."""

    kind = "name error"


class SpecShapeError(SpecError):
    """Tensors whose shapes do not fit the operation that combines them."""

    kind = "shape error"


class SpecValueError(SpecError):
    """A value written in the spec that its use cannot take: an Embedding index past its rows."""

    kind = "value error"


class SpecArithmeticError(SpecError):
    """Arithmetic on numbers written in a step with no usable result: `1/0`, `0.0 ** -1`,
    `(0 - 8) ** 0.5` (too large a result is a SpecLimitError)."""

    kind = "arithmetic error"


class SpecSafetyError(SpecError):
    """Anything that would run code: Python tags, dunders, attribute access, imports."""

    kind = "refused"


class SpecRunError(SpecError):
    """A step that passed every check but that torch refused when it ran (the step is named)."""

    kind = "torch refused the step"


class ExpectationError(SpecError):
    """A call the spec says torch will refuse (`expect_error:`) that torch ran without error:
    the run did not show what the spec meant it to (exit 1, like a failed check)."""

    kind = "no error where one was expected"
    exit_code = 1


class SpecLimitError(SpecError):
    """A spec over a size bound: file size, nesting depth, number of steps, tensor elements."""

    kind = "too large"


class ModelRunError(BadInput):
    """The user's own Python model failed when called on the given inputs (its forward raised,
    or it returned something that cannot be backpropagated)."""


class HookValueError(ModelRunError):
    """A hook was handed a tensor whose values gradexplain does not record (met in a hook,
    which knows no model name: the capture adds it)."""


class ComplexValueError(HookValueError):
    """A hook was handed a complex tensor: gradexplain labels real gradients only (a complex
    tensor's gradient is a conjugate Wirtinger derivative, which no label here says)."""


class TransformedValueError(HookValueError):
    """A hook was handed a tensor inside a torch.func transform (vmap, grad, jvp): a wrapper
    of functorch's, with no values of its own to read (under vmap, one per sample)."""


class HookRefusedError(BadInput):
    """torch refused full backward hooks on the model even on the modules left after the
    in-place probe's refusals (and the wider set tried next): the in-place op was not found."""


class RankFailed(GradexplainError):
    """One rank of a `--ranks N` run raised, or died, before it sent its result; the other
    ranks were stopped. `kind` is what it raised (the class's name) or how it died (the
    signal's name, "SIGKILL", or "exit"). A rank that raised one of gradexplain's own errors
    keeps that error's exit code, and `error_class` names the class (None for any other kind),
    so the run ends as the same error ends a single-process one. `stderr_tail`: the end of
    what the rank wrote on stderr."""

    def __init__(self, rank: int, reason: str, *, kind: str, exit_code: int = 1,
                 error_class: type[GradexplainError] | None = None,
                 stderr_tail: str = "") -> None:
        super().__init__(f"rank {rank} failed: {reason}")
        self.rank = rank
        self.reason = reason
        self.kind = kind
        self.exit_code = exit_code
        self.error_class = error_class
        self.stderr_tail = stderr_tail


class RanksTimedOut(GradexplainError):
    """Ranks of a `--ranks N` run still without a result when the run's timeout ran out: they
    were stopped. `ranks` says which, `timeout` after how many seconds."""

    def __init__(self, ranks: tuple[int, ...], timeout: float) -> None:
        named = ", ".join(str(rank) for rank in ranks[:-1])
        which = f"ranks {named} and {ranks[-1]}" if named else f"rank {ranks[-1]}"
        super().__init__(f"{which} had not finished after the {timeout:g} s timeout "
                         f"and {'were' if named else 'was'} stopped")
        self.ranks = ranks
        self.timeout = timeout


class SessionError(BadInput):
    """A saved session (`walk --save`) that cannot be loaded: not JSON, another schema, or a
    value of the wrong kind at some key path."""

    def __init__(self, file: str, message: str, path: tuple[str | int, ...] = ()) -> None:
        where = Location(file, path=path).key_path()
        super().__init__(f"{file}: not a usable gradexplain session"
                         f"{f' at {where}' if where else ''}: {message}")
