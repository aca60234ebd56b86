"""The command line as a user meets it: help, version, summaries, and never importing torch where
it is not needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, SPECS, run_cli

ALL_SPECS = sorted(SPECS.glob("*.yaml"))


def torch_imported_by(*args: str) -> bool:
    """Run the CLI in-process in a fresh interpreter and report whether torch got imported."""
    code = (
        "import sys\n"
        f"sys.argv = ['gradexplain', *{list(args)!r}]\n"
        "from gradexplain.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('TORCH=' + str('torch' in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120, check=False)
    marker = [line for line in done.stderr.splitlines() if line.startswith("TORCH=")]
    assert marker, done.stderr
    return marker[-1] == "TORCH=True"


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
    assert "Usage:" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_validate_without_spec_is_a_usage_error() -> None:
    result = run_cli("validate")
    assert result.code == 2
    assert "Missing argument" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_does_not_import_torch() -> None:
    assert not torch_imported_by("--help")


@pytest.mark.parametrize("spec", ALL_SPECS, ids=[path.stem for path in ALL_SPECS])
def test_validate_does_not_import_torch(spec: object) -> None:
    assert not torch_imported_by("validate", str(spec))


def test_the_probe_can_see_torch() -> None:
    # The probe above must be able to say True, or its False would prove nothing.
    code = "import sys, gradexplain.build; print('torch' in sys.modules)"
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
