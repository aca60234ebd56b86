"""The repository's places and the real command line run as a user would, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
SPECS = REPO / "specs"
GOLDEN = REPO / "tests" / "golden"


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None) -> Result:
    """Run `python -m gradexplain ARGS` as a user would, with colour off."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "gradexplain", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=env,
        timeout=120,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def imported_by(*args: str, env: dict[str, str] | None = None) -> set[str]:
    """Run the CLI in-process in a fresh interpreter; the top-level packages it imported."""
    return {name.split(".")[0] for name in modules_imported_by(*args, env=env)}


def modules_imported_by(*args: str, env: dict[str, str] | None = None) -> set[str]:
    """Run the CLI in-process in a fresh interpreter; every module it imported, by full name."""
    code = (
        "import sys\n"
        f"sys.argv = ['gradexplain', *{list(args)!r}]\n"
        "from gradexplain.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('IMPORTED=' + ' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=120, check=False)
    marker = [line for line in done.stderr.splitlines() if line.startswith("IMPORTED=")]
    assert marker, done.stderr
    return set(marker[-1].removeprefix("IMPORTED=").split())


def torch_imported_by(*args: str, env: dict[str, str] | None = None) -> bool:
    return "torch" in imported_by(*args, env=env)


def one_error_line(result: Result) -> str:
    """Bad input as the command line must report it: exit 2, nothing on stdout, one line on
    stderr and no traceback; that line."""
    assert result.code == 2, result
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]
