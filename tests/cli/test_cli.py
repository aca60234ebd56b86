"""The command line as a user meets it: help, version, summaries, and never importing torch where
it is not needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import (
    REPO,
    SPECS,
    imported_by,
    modules_imported_by,
    run_cli,
    torch_imported_by,
)

ALL_SPECS = sorted(SPECS.glob("*.yaml"))


def complete(words: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment bash gives `gradexplain` to complete the last of `words` (its completion
    script passes the words typed and the index of the one under the cursor)."""
    return {**(env or {}), "_GRADEXPLAIN_COMPLETE": "complete_bash", "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split(" ")) - 1)}


def test_help_lists_commands_and_exit_codes() -> None:
    result = run_cli("--help")
    assert result.code == 0
    assert "validate" in result.stdout
    assert "Exit codes: 0 success, 1 the run found a problem, 2 bad input." in result.stdout


def test_validate_help_explains() -> None:
    result = run_cli("validate", "--help")
    assert result.code == 0
    assert "torch is not imported" in result.stdout


def test_version() -> None:
    result = run_cli("--version")
    assert result.code == 0
    assert result.stdout.startswith("gradexplain 0.")


def test_no_arguments_shows_help() -> None:
    result = run_cli()
    # The help itself (click's version decides the stream and the exit code, and words the
    # usage line; the help text is ours).
    help_text = run_cli("--help").stdout.strip()
    assert "Exit codes: 0 success" in help_text
    assert help_text in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_validate_without_spec_is_a_usage_error() -> None:
    result = run_cli("validate")
    assert result.code == 2
    assert result.stdout == ""
    # click words the complaint; the argument it names is ours.
    assert "SPEC" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_does_not_import_torch() -> None:
    assert not torch_imported_by("--help")


@pytest.mark.parametrize("spec", ALL_SPECS, ids=[path.stem for path in ALL_SPECS])
def test_validate_does_not_import_torch(spec: object) -> None:
    assert not torch_imported_by("validate", str(spec))


@pytest.mark.parametrize("words", ["gradexplain wa", "gradexplain walk --fo",
                                   "gradexplain walk specs/two_modules.yaml --format j",
                                   "gradexplain validate specs/tw"])
def test_shell_completion_does_not_import_torch(words: str) -> None:
    assert not torch_imported_by(env=complete(words))


# pydantic is what typer (0.2x) converts parameter values with; importing it costs about as much
# as the whole start-up budget of these commands (bench/bench.py measures the times; a test here
# only makes sure the slow import stays out of their path).
@pytest.mark.parametrize(("args", "words"), [
    (("--help",), None),
    (("validate", "specs/two_modules.yaml", "specs/embedding.yaml"), None),
    ((), "gradexplain walk --fo"),
    (("walk", "--help"), None),
    # Values are converted without it (cli_conversion; tests/cli/test_conversion.py).
    (("walk", "specs/two_modules.yaml", "--format", "json", "--pass", "full", "--hook", "tensor",
      "--threads", "1", "--max-values", "100", "--module", "module"), None),
])
def test_start_up_paths_do_not_import_pydantic(args: tuple[str, ...], words: str | None) -> None:
    imported = imported_by(*args, env=complete(words) if words else None)
    assert "typer" in imported
    assert "pydantic" not in imported


@pytest.mark.parametrize(("args", "words"), [
    (("--help",), None),
    (("validate", "specs/two_modules.yaml"), None),
    ((), "gradexplain walk --fo"),
])
def test_start_up_paths_do_not_import_the_records(args: tuple[str, ...],
                                                  words: str | None) -> None:
    # The records of a run are dozens of dataclasses, slow to define, and none of these
    # commands has a run to record.
    imported = modules_imported_by(*args, env=complete(words) if words else None)
    assert "gradexplain.cli_options" in imported
    assert not {name for name in imported if name.startswith("gradexplain.records")}


def test_the_probe_can_see_the_records() -> None:
    assert "gradexplain.records.trace" in modules_imported_by("walk", "--load", "nope.json")


def test_the_probe_can_see_pydantic() -> None:
    # A value cli_conversion cannot convert goes on to typer's own conversion, which uses
    # pydantic if this typer does at all (older typers do not): the probe can say pydantic.
    from importlib.util import find_spec

    typer_converts_with_pydantic = find_spec("typer._adapters") is not None
    imported = imported_by("walk", "specs/two_modules.yaml", "--threads", "many")
    assert ("pydantic" in imported) == typer_converts_with_pydantic


@pytest.mark.parametrize(("words", "offered", "not_offered"), [
    ("gradexplain wa", {"walk"}, set()),
    ("gradexplain walk --fo", {"--format"}, set()),
    ("gradexplain walk specs/two_modules.yaml --format j", {"json"}, set()),
    ("gradexplain walk --pass b", {"both"}, set()),
    # An eager option's callback must not run: the version string is not a completion.
    ("gradexplain --version ", {"walk", "validate"}, {"gradexplain"}),
])
def test_shell_completion_offers(words: str, offered: set[str], not_offered: set[str]) -> None:
    done = subprocess.run(["gradexplain"], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **complete(words)}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    answers = {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    assert offered <= answers, done.stdout
    assert not answers & not_offered, done.stdout


@pytest.mark.parametrize("files", [
    ["specs/two_modules.yaml"],
    ["specs/two_modules.yaml", "specs/does-not-exist.yaml", "specs/embedding.yaml"],
    ["README.md"],
    ["tests/helpers/pymodels.py:make_mlp"],
])
def test_quick_validate_matches_typer(files: list[str]) -> None:
    # `validate FILE...` is read without typer to start fast; after `--`, typer reads it.
    quick = run_cli("validate", *files)
    through_typer = run_cli("validate", "--", *files)
    assert quick == through_typer
    assert quick.stdout or quick.stderr


def test_walk_of_a_bad_spec_fails_before_importing_torch(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("inputs:\n  x: {value: 1.0, requires_grad: true}\nforward: ['y = x * w']\n"
                   "backward: y\n", encoding="utf-8")
    for command in ("walk", "diff", "report"):
        assert not torch_imported_by(command, str(bad))
    assert torch_imported_by("walk", "specs/two_modules.yaml")


def test_the_probe_can_see_torch() -> None:
    # The probe above must be able to say True, or its False would prove nothing.
    code = "import sys, gradexplain.capture.build; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120, check=True)
    assert done.stdout.strip() == "True"


def test_validate_summary_counts_the_spec() -> None:
    # two_modules: modules `module` and `module2`; layers l and activation; parameters p (2
    # values) and l.weight (1x2); steps: 1 in module, 2 in module2, 2 at the top level.
    result = run_cli("validate", "specs/two_modules.yaml")
    assert result.code == 0
    assert result.stdout == (
        "specs/two_modules.yaml: ok, two_modules: 2 modules, 2 layers, "
        "2 parameters (4 values), 5 steps; backward of z\n"
    )


def test_validate_every_spec() -> None:
    result = run_cli("validate", *(str(path.relative_to(REPO)) for path in ALL_SPECS))
    assert result.code == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(ALL_SPECS)
    assert len(ALL_SPECS) >= 8


def test_traceback_flag_shows_one_on_purpose(tmp_path: object) -> None:
    result = run_cli("--traceback", "validate", "does-not-exist.yaml")
    assert result.code != 0
    assert "Traceback" in result.stderr


def test_console_script_is_installed() -> None:
    done = subprocess.run(["gradexplain", "validate", "specs/embedding.yaml"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0
    assert done.stdout.startswith("specs/embedding.yaml: ok")
