"""The README's promises: a Quick start of exactly two commands, torch pinned in both, the second
one being what CI runs, and the console examples matching real output."""

from __future__ import annotations

import re

import pytest

from tests.helpers.cli import REPO, run_cli
from tests.helpers.printed import same_printout

README = (REPO / "README.md").read_text(encoding="utf-8")


def quick_start_commands() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Quick start has one shell block"
    return [line for line in blocks[0].splitlines() if line.strip()]


def test_quick_start_is_two_commands_with_torch_pinned() -> None:
    run, test = quick_start_commands()
    for command in (run, test):
        assert "torch==2.13.0" in command.split()
    assert run.endswith("gradexplain walk specs/two_modules.yaml")
    assert "'.[test]'" in test and test.endswith("python -m pytest")


def test_ci_runs_the_readme_test_command() -> None:
    _, test = quick_start_commands()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert test in ci.splitlines()
    assert ci.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in ci


def test_pyproject_keeps_a_torch_range() -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"torch>=2.1"' in pyproject
    assert "torch==" not in pyproject


def test_console_example_is_real_output() -> None:
    example = re.search(r"\$ gradexplain validate specs/two_modules.yaml\n(.*?)\n```", README,
                        flags=re.S)
    assert example is not None
    result = run_cli("validate", "specs/two_modules.yaml")
    assert result.stdout.strip() == example.group(1).strip()


def test_bad_spec_example_is_real_output() -> None:
    example = re.search(r"\$ gradexplain validate (examples/bad.yaml)\n(.*?)\n```", README,
                        flags=re.S)
    assert example is not None
    result = run_cli("validate", example.group(1))
    assert result.code == 2
    assert result.stdout == ""
    assert result.stderr.strip() == example.group(2).strip()


def assert_excerpt_is_real(pattern: str) -> None:
    """Each README block matching `pattern` (the command's arguments, then the excerpt): every
    line it shows, between the `...`, is in the real output of that command, its numbers up to
    the last printed digit (the README was written on one CPU; another may round the last bit
    of a gradient differently, and fmt's fifth digit, or a column's padding, with it)."""
    examples = list(re.finditer(pattern, README, flags=re.S))
    assert examples
    for example in examples:
        command, arguments, excerpt = example.groups()
        result = run_cli(command, *arguments.split())
        assert result.code == 0, result.stderr
        real = result.stdout.splitlines()
        shown = [line for line in excerpt.splitlines() if line != "..."]
        assert len(shown) > 4
        for line in shown:
            assert any(same_printout(line, candidate) for candidate in real), line


@pytest.mark.parametrize("command", ["walk", "diff"])
def test_console_excerpt_is_real_output(command: str) -> None:
    """Every line of the README's walk and diff excerpts (between the `...`) is in the real
    output."""
    assert_excerpt_is_real(rf"\$ gradexplain ({command}) (specs/.*?)\n(.*?)\n```")


def test_python_model_excerpt_is_real_output() -> None:
    """The Python-model excerpt runs the example file the README points at."""
    assert_excerpt_is_real(r"\$ gradexplain (walk) (examples/\S+ .*?)\n(.*?)\n```")


def test_every_spec_is_in_the_readme_table() -> None:
    for path in sorted((REPO / "specs").glob("*.yaml")):
        assert f"(specs/{path.name})" in README, path.name

