"""Bad input a new user meets first: a tab-indented spec, a spec file that is missing, a folder
or unreadable, an option value that is not one of its choices. Each is exit 2 and one line that
names the thing to fix, in our words: never the YAML parser's, never pydantic's."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import SPECS, one_error_line, run_cli
from tests.helpers.messages import raised_by
from tests.helpers.pycli import CLI, in_process

TWO_MODULES = str(SPECS / "two_modules.yaml")
SPEC_COMMANDS = ("validate", "walk", "diff", "report")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    return in_process(capsys, monkeypatch)


# --- tabs ------------------------------------------------------------------------------------

# (the spec, the 1-based line its first indenting tab is on)
TABBED = [
    ("inputs:\n\tx: {value: 1.0, requires_grad: true}\nforward: ['y = x * 2']\nbackward: y\n", 2),
    ("inputs:\n  \tx: {value: 1.0, requires_grad: true}\nforward: ['y = x * 2']\nbackward: y\n",
     2),
    ("inputs:\n  x:\n    value: 1.0\n\t  requires_grad: true\nforward: ['y = x * 2']\n"
     "backward: y\n", 4),
    ("inputs:\n  x: {value: 1.0, requires_grad: true}\nforward:\n\t- 'y = x * 2'\nbackward: y\n",
     4),
    ("inputs:\n  x: {value: 1.0, requires_grad: true}\nmodules:\n  m:\n\t\tforward: {args: [a], "
     "steps: ['b = a * 2']}\nforward: ['y = m(x)']\nbackward: y\n", 5),
]


@pytest.mark.parametrize(("text", "line"), TABBED, ids=[f"line{line}-{i}" for i, (_, line)
                                                        in enumerate(TABBED)])
@pytest.mark.parametrize("command", ["validate", "walk"])
def test_a_tab_in_the_indentation_is_named(text: str, line: int, command: str,
                                           write_spec: Callable[[str], Path]) -> None:
    path = write_spec(text)
    message = one_error_line(run_cli(command, str(path)))
    assert message.startswith(f"error: {path}:{line}:"), message
    assert f"line {line} uses a tab" in message and "spaces" in message, message
    # PyYAML's own words for it, asked of PyYAML, are not what the user reads.
    said = raised_by(lambda: yaml.compose(text, Loader=getattr(yaml, "CSafeLoader",
                                                               yaml.SafeLoader)))
    assert said not in message


def test_the_same_spec_with_spaces_is_fine(write_spec: Callable[[str], Path]) -> None:
    # The tab is the whole problem: with two spaces in its place every spec above is good.
    for text, _ in TABBED:
        result = run_cli("validate", str(write_spec(text.replace("\t", "  "))))
        assert result.code == 0, (text, result.stderr)


# --- the spec file itself --------------------------------------------------------------------

@pytest.mark.parametrize("command", SPEC_COMMANDS)
def test_a_missing_spec_file_is_said_to_be_missing(command: str, tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    message = one_error_line(run_cli(command, str(path)))
    assert message == f"error: {path}: the file does not exist"


def test_a_near_miss_is_suggested(cli: CLI) -> None:
    message = one_error_line(cli("validate", "specs/two_module.yaml"))
    assert message.startswith("error: specs/two_module.yaml: the file does not exist")
    assert "specs/two_modules.yaml?" in message


@pytest.mark.parametrize("command", SPEC_COMMANDS)
def test_a_folder_is_not_a_spec(command: str, tmp_path: Path) -> None:
    (tmp_path / "inside.yaml").write_text("forward: ['y = x']\n", encoding="utf-8")
    message = one_error_line(run_cli(command, str(tmp_path)))
    assert message.startswith(f"error: {tmp_path}: ")
    assert "is a folder" in message and "YAML error" not in message


def test_an_unreadable_spec_says_so(cli: CLI, monkeypatch: pytest.MonkeyPatch,
                                    write_spec: Callable[[str], Path]) -> None:
    # Tests may run as root, whom chmod 000 does not stop: the refusal is the OS's, simulated.
    path = write_spec(Path(TWO_MODULES).read_text(encoding="utf-8"))
    real_open = os.open

    def refuse(file: str | Path, flags: int, *args: int, **kwargs: int) -> int:
        if Path(file) == path:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    for command in ("validate", "walk"):
        message = one_error_line(cli(command, str(path)))
        assert message.startswith(f"error: {path}: "), message
        assert "cannot be read" in message and "permission" in message, message
        assert "YAML error" not in message


# --- option values ---------------------------------------------------------------------------

FORMATS = ("text", "json", "markdown")
PASSES = ("legacy", "full", "both")
HOOKS = ("forward_pre", "forward", "backward", "full_backward_pre", "full_backward", "tensor",
         "post_accumulate_grad", "node_pre", "node")
LOSSES = ("sum", "mean")

BAD_CHOICES = [
    (command, option, bad, choices)
    for command, options in (
        ("walk", (("--format", FORMATS), ("-f", FORMATS), ("--pass", PASSES), ("--hook", HOOKS),
                  ("--loss", LOSSES))),
        ("diff", (("--format", FORMATS), ("--loss", LOSSES))),
        ("report", (("--loss", LOSSES),)),
    )
    for option, choices in options
    for bad in ("csv", "JSON")
]


@pytest.mark.parametrize(("command", "option", "bad", "choices"), BAD_CHOICES,
                         ids=[f"{c}{o}={b}" for c, o, b, _ in BAD_CHOICES])
def test_a_bad_choice_names_the_option_the_value_and_the_choices(
    cli: CLI, command: str, option: str, bad: str, choices: tuple[str, ...],
) -> None:
    result = cli(command, TWO_MODULES, option, bad)
    assert result.code == 2, result
    assert result.stdout == "" and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if f"{bad!r}" in line]
    assert f"'{option}'" in line, line
    assert all(choice in line for choice in choices), line
    assert "Value error" not in result.stderr and "value_error" not in result.stderr


def test_a_repeated_option_names_the_bad_one(cli: CLI) -> None:
    result = cli("walk", TWO_MODULES, "--hook", "backward", "--hook", "tensr")
    assert result.code == 2, result
    assert "'tensr'" in result.stderr and "Value error" not in result.stderr


@pytest.mark.parametrize(("option", "value"), [("--format", "json"), ("-f", "markdown"),
                                               ("--pass", "legacy"), ("--hook", "tensor")])
def test_good_choices_still_work(cli: CLI, option: str, value: str) -> None:
    assert cli("walk", TWO_MODULES, option, value).code == 0


@pytest.mark.parametrize("args", [
    ("walk", ""), ("validate", ""), ("walk", "--load", ""), ("report", "specs/two_modules.yaml",
                                                            "-o", ""),
    ("walk", "specs/two_modules.yaml", "--save", ""),
    ("walk", "examples/models.py:make_mlp", "--inputs", ""),
], ids=["spec", "validate", "--load", "-o", "--save", "--inputs"])
def test_an_empty_path_is_said_to_be_empty(args: tuple[str, ...]) -> None:
    """An empty path was taken for `.`, the current folder: ".: is a folder"."""
    result = run_cli(*args)
    assert result.code == 2
    assert "an empty path" in result.stderr
    assert "is a folder" not in result.stderr and "Traceback" not in result.stderr
