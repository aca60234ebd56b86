"""Parameter values converted without pydantic (`cli_conversion`), against typer's own conversion
as the oracle: every parameter every command declares, good values and bad, converts to the same
value or fails with the same error, and the command line says the same whichever converts.
(tests/cli/test_cli.py: which commands import pydantic.)"""

from __future__ import annotations

import contextlib
import sys
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import typer
import typer.main

from gradexplain import cli
from gradexplain import cli_options as option
from tests.helpers.cli import REPO, Result
from tests.helpers.pycli import CLI, in_process

# Older typers convert without pydantic (and have no such classes for cli_conversion to use).
pytest.importorskip("typer._coercion", reason="only typer 0.2x converts through pydantic")

from gradexplain.cli_conversion import NotConverted, convert, quick_conversion
from gradexplain.cli_startup import conversion_without_pydantic

TWO_MODULES = "specs/two_modules.yaml"

STRINGS = ["abc", "", "-x", "é", "\udcff", "a\x00b", "4x3:int64"]
PATHS = [TWO_MODULES, "", "specs", "does/not/exist.yaml", "-", "~", "\udcff"]
NUMBERS = ["1", "12", "0012", "1024", "1025", "0", "-1", "+1", " 12", "1_0", "1.0", "abc", "",
           "٣", "1" * 19, "9" * 5000, 5, True]


def choices_of(annotation: Any) -> list[object]:
    names = [str(choice.value) for choice in annotation]
    return [*names, *(name.upper() for name in names), "csv", "", next(iter(annotation))]


def values_for(annotation: Any) -> list[object]:
    """The values to try for a parameter of `annotation`: for a list, each single value as a
    one-item list, and a few longer lists. A type none of these covers fails the test: a new
    option's type must be tried here before it is trusted."""
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        singles = values_for(item)
        return [(), *((value,) for value in singles), tuple(singles[1:4]), singles[1]]
    if annotation is str:
        values: list[object] = list(STRINGS)
    elif annotation is int:
        values = list(NUMBERS)
    elif annotation is bool:
        values = [True, False, "x"]
    elif isinstance(annotation, type) and issubclass(annotation, Path):
        values = [*PATHS, Path(TWO_MODULES)]
    elif isinstance(annotation, type) and issubclass(annotation, Enum):
        values = choices_of(annotation)
    else:
        raise AssertionError(f"no values to try for {annotation!r}")
    return [None, *values]


def every_parameter() -> list[tuple[str, Any]]:
    command = typer.main.get_command(cli.app)
    assert isinstance(command, typer.core.TyperGroup)
    found: list[tuple[str, Any, Any]] = [
        (f"(top).{param.name}", param, command) for param in command.params]
    for name, sub in command.commands.items():
        found += [(f"{name}.{param.name}", param, sub) for param in sub.params]
    return [(label, (param, command)) for label, param, command in found]


PARAMETERS = every_parameter()


def outcome(conversion: Any, value: object, param: Any, ctx: Any) -> tuple[str, object]:
    try:
        converted = conversion.coerce(value, param=param, ctx=ctx)
    except Exception as error:
        return "error " + type(error).__name__, str(error)
    return "value " + type(converted).__name__, converted


@pytest.mark.parametrize(("label", "declared"), PARAMETERS, ids=[label for label, _ in PARAMETERS])
def test_every_value_converts_as_typer_converts_it(label: str, declared: tuple[Any, Any],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    param, command = declared
    ctx = typer.Context(command)
    for value in values_for(param.type_descriptor.annotation):
        typers = param.get_runtime_param()
        quick = quick_conversion(param, param.get_runtime_param)
        assert outcome(quick, value, param, ctx) == outcome(typers, value, param, ctx), (
            label, value)


# The values that must not need typer's conversion (else nothing would be faster): those a walk
# of a spec or of a Python model is given.
CONVERTED_HERE = [
    ("walk.spec", TWO_MODULES, TWO_MODULES),
    ("walk.spec", "examples/models.py:make_deep", "examples/models.py:make_deep"),
    ("walk.output_format", "json", option.Format.json),
    ("walk.output_format", option.Format.text, option.Format.text),
    ("walk.pass_", "full", option.PassChoice.full),
    ("walk.hook", ("tensor", "node"), [option.HookChoice.tensor, option.HookChoice.node]),
    ("walk.input_shapes", ("4x3", "2x5:int64"), ["4x3", "2x5:int64"]),
    ("walk.load", "run.json", Path("run.json")),
    ("walk.threads", "1024", 1024),
    ("walk.max_values", "0012", 12),
    ("walk.loss", "mean", option.LossChoice.mean),
    ("report.output", "out.md", Path("out.md")),
]


@pytest.mark.parametrize(("label", "value", "expected"), CONVERTED_HERE,
                         ids=[f"{label}={value}" for label, value, _ in CONVERTED_HERE])
def test_common_values_are_converted_without_typer(label: str, value: object,
                                                   expected: object) -> None:
    param, command = dict(PARAMETERS)[label]
    descriptor = param.type_descriptor
    converted = convert(descriptor.annotation, descriptor.parameter_info, value, param,
                        typer.Context(command))
    assert converted == expected and type(converted) is type(expected)


@pytest.mark.parametrize(("label", "value"), [("walk.threads", "0"), ("walk.threads", "+1"),
                                               ("walk.max_values", "1_0"), ("walk.order", "x"),
                                               ("walk.threads", "1" * 19)])
def test_other_values_are_left_to_typer(label: str, value: object) -> None:
    param, command = dict(PARAMETERS)[label]
    descriptor = param.type_descriptor
    with pytest.raises(NotConverted):
        convert(descriptor.annotation, descriptor.parameter_info, value, param,
                typer.Context(command))


COMMAND_LINES = [
    ("walk", TWO_MODULES, "--threads", "0"),
    ("walk", TWO_MODULES, "--threads", "abc"),
    ("walk", TWO_MODULES, "--threads", "2000"),
    ("diff", TWO_MODULES, "--max-values", "-3"),
    ("report", TWO_MODULES, "--max-values", "1.5"),
    ("walk", TWO_MODULES, "--format", "csv"),
    ("walk", TWO_MODULES, "--hook", "tensor", "--hook", "tensr"),
    ("walk", TWO_MODULES, "--pass", "JSON"),
    ("walk", TWO_MODULES, "--loss", "max"),
    ("walk", TWO_MODULES, "--order=yes"),
    ("walk", TWO_MODULES, "--threads"),
    ("walk", TWO_MODULES, "--nope"),
    ("walk", "--help"),
    ("report", "--help"),
    ("validate", "--", TWO_MODULES, "does-not-exist.yaml"),
    ("--version",),
]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    return in_process(capsys, monkeypatch)


@pytest.mark.parametrize("args", COMMAND_LINES, ids=[" ".join(args) for args in COMMAND_LINES])
def test_the_command_line_says_what_typer_says(args: tuple[str, ...], run: CLI,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    quick = run(*args)
    monkeypatch.setattr(cli, "conversion_without_pydantic", contextlib.nullcontext)
    typers = run(*args)
    assert quick == typers
    assert quick.code in (0, 2)


@pytest.mark.parametrize("args", [("--threads", "0"), ("--format", "csv"), ("--max-values", "x")])
def test_a_bad_value_is_a_usage_error(args: tuple[str, ...], run: CLI) -> None:
    result: Result = run("walk", TWO_MODULES, *args)
    assert result.code == 2 and result.stdout == ""
    assert "Traceback" not in result.stderr
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert f"'{args[0]}'" in error


def test_typer_converts_again_after_the_command() -> None:
    parameter = typer.core._TyperParameter
    original = parameter.get_runtime_param
    with conversion_without_pydantic():
        assert parameter.get_runtime_param is not original
    assert parameter.get_runtime_param is original


def test_without_the_private_classes_typer_converts_as_ever(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A typer whose private classes moved: cli_conversion cannot be imported, and typer keeps
    # its own conversion (the command line works, only slower).
    monkeypatch.setitem(sys.modules, "gradexplain.cli_conversion", None)
    original = typer.core._TyperParameter.get_runtime_param
    with conversion_without_pydantic():
        assert typer.core._TyperParameter.get_runtime_param is original
