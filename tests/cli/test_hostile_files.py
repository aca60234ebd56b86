"""Hostile files (issue 19, files): what the command line reads and writes, run as a user would.

Reading: only regular files, within a bound (a FIFO, /dev/zero, a folder named like a spec are
refused at once, one line, exit 2); `report --all` never takes an entry for Python to import.
Writing: never over an input, checked before the run; atomic (a failed write leaves the old file
and no temporary file); `report --all` refuses two specs that would share a report; stdout on a
full disk is one line, exit 2, and a reader that went away ends the output quietly.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gradexplain.records.session import MAX_SESSION_BYTES
from tests.helpers.cli import REPO, SPECS, Result, torch_imported_by

TIMEOUT = 60  # seconds: every refusal here comes before torch is imported, a walk in a few
GOOD = SPECS / "two_modules.yaml"
DEEP = "name: " + "[" * 30_000 + "]" * 30_000 + "\n"


def error_line(result: Result, *names: str) -> str:
    """The one `error:` line of a refused command, which names every one of `names`."""
    assert result.code == 2, result
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def run(*args: str, cwd: Path, limit_file_bytes: int | None = None) -> Result:
    """The CLI in a subprocess with a timeout (a hang fails the test); `limit_file_bytes`:
    files it writes can grow to that many bytes only (RLIMIT_FSIZE), so a write fails mid-way."""

    def limit() -> None:
        if limit_file_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death by signal
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    done = subprocess.run([sys.executable, "-m", "gradexplain", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=TIMEOUT, check=False, preexec_fn=limit,
                          env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO),
                               "PYTHONDONTWRITEBYTECODE": "1"})
    return Result(done.returncode, done.stdout, done.stderr)


def good_spec(folder: Path, name: str = "good.yaml") -> Path:
    path = folder / name
    shutil.copyfile(GOOD, path)
    return path


# --- report --all never runs Python found in the folder --------------------------------------

EVIL = ("import pathlib\n"
        "pathlib.Path(__file__).with_name('MARKER').write_text('imported')\n"
        "def make():\n    import torch\n    return torch.nn.Linear(2, 2)\n")


def test_report_all_never_imports_an_entry_named_like_a_python_target(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "evil.py").write_text(EVIL, encoding="utf-8")
    (folder / "evil.py:make.yaml").mkdir()
    (folder / "evil.py:make2.yaml").symlink_to(folder / "nowhere")
    os.mkfifo(folder / "evil.py:make3.yaml")
    good_spec(folder)
    result = run("report", "--all", str(folder), "-o", str(tmp_path / "out"), cwd=folder)
    assert not (folder / "MARKER").exists()
    assert result.code == 2, result
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    for entry in ("evil.py:make.yaml", "evil.py:make2.yaml", "evil.py:make3.yaml"):
        assert sum(entry in line for line in errors) == 1, (entry, errors)
    assert len(errors) == 3 and len(result.stderr.splitlines()) == 4, result.stderr
    # The regular spec is still reported, and the index written.
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["good.md", "index.md"]
    assert "wrote 1 report(s)" in result.stderr


def test_report_all_reads_a_symlink_to_a_regular_spec(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "linked.yaml").symlink_to(good_spec(tmp_path))
    result = run("report", "--all", str(folder), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert result.code == 0, result
    assert (tmp_path / "out" / "linked.md").read_text(encoding="utf-8").startswith("#")


# --- only regular files are read, within a bound ----------------------------------------------

@pytest.fixture
def not_regular(tmp_path: Path) -> dict[str, Path]:
    """A device, a symlink to it and a FIFO (reading it would block for ever), each named like
    the file it stands in for."""
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.yaml")
    return {"device": Path("/dev/zero"), "symlink": tmp_path / "zero.yaml",
            "fifo": tmp_path / "fifo.yaml"}


@pytest.mark.parametrize("kind", ["device", "symlink", "fifo"])
@pytest.mark.parametrize("command", ["validate", "walk", "report"])
def test_a_spec_that_is_no_regular_file_is_refused_at_once(
        command: str, kind: str, not_regular: dict[str, Path], tmp_path: Path) -> None:
    path = not_regular[kind]
    line = error_line(run(command, str(path), cwd=tmp_path), str(path))
    assert "regular file" in line


@pytest.mark.parametrize("kind", ["device", "symlink", "fifo"])
def test_a_session_that_is_no_regular_file_is_refused_at_once(
        kind: str, not_regular: dict[str, Path], tmp_path: Path) -> None:
    path = not_regular[kind]
    line = error_line(run("walk", "--load", str(path), cwd=tmp_path), str(path))
    assert "regular file" in line


def test_a_session_over_the_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_SESSION_BYTES + 1)
    line = error_line(run("report", "--load", str(path), cwd=tmp_path), str(path))
    assert f"{MAX_SESSION_BYTES:,}" in line


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_an_inputs_file_that_is_no_regular_file_is_refused_before_user_code_runs(
        kind: str, not_regular: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(EVIL, encoding="utf-8")
    path = not_regular[kind]
    result = run("walk", "model.py:make", "--inputs", str(path), cwd=tmp_path)
    assert "regular file" in error_line(result, "--inputs", str(path))
    assert not (tmp_path / "MARKER").exists()


# --- never write over an input; -o and --save checked first ---------------------------------

def test_report_never_writes_over_its_spec_nor_a_link_to_it(tmp_path: Path) -> None:
    spec = good_spec(tmp_path)
    before = spec.read_bytes()
    (tmp_path / "hard.yaml").hardlink_to(spec)
    (tmp_path / "soft.yaml").symlink_to(spec)
    for target in ("good.yaml", "hard.yaml", "soft.yaml"):
        line = error_line(run("report", "good.yaml", "-o", target, cwd=tmp_path), target)
        assert "input" in line
    error_line(run("walk", "good.yaml", "--save", "hard.yaml", cwd=tmp_path), "hard.yaml")
    assert spec.read_bytes() == before


def test_the_saved_session_and_inputs_file_are_never_written_over(tmp_path: Path) -> None:
    good_spec(tmp_path)
    assert run("walk", "good.yaml", "--save", "run.json", cwd=tmp_path).code == 0
    saved = (tmp_path / "run.json").read_bytes()
    error_line(run("report", "--load", "run.json", "-o", "run.json", cwd=tmp_path), "run.json")
    error_line(run("walk", "--load", "run.json", "--save", "run.json", cwd=tmp_path),
               "run.json")
    assert (tmp_path / "run.json").read_bytes() == saved
    model = tmp_path / "model.py"
    model.write_text(EVIL, encoding="utf-8")
    inputs = tmp_path / "x.pt"
    inputs.write_bytes(b"not looked at")
    for target in ("x.pt", "model.py"):
        error_line(run("report", "model.py:make", "--inputs", "x.pt", "-o", target,
                       cwd=tmp_path), target)
    assert not (tmp_path / "MARKER").exists()  # refused before the model's file ran
    assert inputs.read_bytes() == b"not looked at"


@pytest.mark.parametrize(("target", "output"), [
    ("model:make", "model.py"), ("pkg.mod:make", "pkg/mod.py"),
    ("pkg.mod:make", "pkg/__init__.py"), ("pkg.mod:make", "pkg/../pkg/mod.py")])
@pytest.mark.parametrize(("command", "flag"), [("report", "-o"), ("walk", "--save")])
def test_the_module_of_a_dotted_target_is_never_written_over(
        target: str, output: str, command: str, flag: str, tmp_path: Path) -> None:
    # `module:NAME` and `pkg.mod:NAME` name no file, yet the run reads one (or several).
    (tmp_path / "model.py").write_text(EVIL, encoding="utf-8")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(EVIL.replace("MARKER", "MARKER_PKG"),
                                                  encoding="utf-8")
    (tmp_path / "pkg" / "mod.py").write_text(EVIL, encoding="utf-8")
    before = {path: path.read_bytes() for path in tmp_path.rglob("*.py")}
    line = error_line(run(command, target, "--input", "1x2", flag, output, cwd=tmp_path),
                      output)
    assert "an input of this run" in line
    assert {path: path.read_bytes() for path in tmp_path.rglob("*.py")} == before
    # Refused before any of the user's code ran: the package was not imported to find it.
    assert not list(tmp_path.rglob("MARKER*"))


@pytest.mark.parametrize(("flag", "target", "says"), [
    ("-o", "nowhere/report.md", "does not exist"),
    ("-o", "folder", "folder"),
    ("--save", "nowhere/run.json", "does not exist"),
])
def test_an_output_that_cannot_be_written_is_refused_before_the_run(
        flag: str, target: str, says: str, tmp_path: Path) -> None:
    good_spec(tmp_path)
    (tmp_path / "folder").mkdir()
    command = "report" if flag == "-o" else "walk"
    assert says in error_line(run(command, "good.yaml", flag, target, cwd=tmp_path), target)
    # Before the run: torch is never imported.
    spec = str(tmp_path / "good.yaml")
    assert not torch_imported_by(command, spec, flag, str(tmp_path / target))


@pytest.mark.parametrize(("command", "flag", "stream", "says"), [
    ("report", "-o", "/dev/stdout", "leave out -o to print the report to stdout"),
    ("walk", "--save", "/dev/stderr", "give a file name to write"),
])
def test_a_standard_stream_on_a_pipe_is_refused_before_the_run(
        command: str, flag: str, stream: str, says: str, tmp_path: Path) -> None:
    # stdout and stderr are pipes here; realpath takes /dev/stdout to /proc/PID/fd/pipe:[N],
    # a name that does not exist, which once let it through to fail after the run.
    good_spec(tmp_path)
    line = error_line(run(command, "good.yaml", flag, stream, cwd=tmp_path), stream, "pipe")
    assert line.endswith(says)
    assert not torch_imported_by(command, str(tmp_path / "good.yaml"), flag, stream)


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="no /dev/stdout here")
@pytest.mark.parametrize(("command", "flag", "stream", "says"), [
    ("report", "-o", "/dev/stdout", "leave out -o to print the report to stdout"),
    ("walk", "--save", "/dev/stdout", "give a file name to write"),
    ("walk", "--save", "/dev/stderr", "give a file name to write"),
])
def test_a_standard_stream_on_a_file_is_refused_and_the_file_kept(
        command: str, flag: str, stream: str, says: str, tmp_path: Path) -> None:
    # `{ echo header; gradexplain report x -o /dev/stdout; } > all.md`: written whole through
    # a rename, the report would replace all.md, the shell's header and all.
    good_spec(tmp_path)
    shell_file = tmp_path / "all.txt"
    shell_file.write_text("written by the shell\n", encoding="utf-8")
    with shell_file.open("a", encoding="utf-8") as opened:
        done = subprocess.run([sys.executable, "-m", "gradexplain", command, "good.yaml", flag,
                               stream], stdout=opened, stderr=opened, cwd=tmp_path,
                              timeout=TIMEOUT, check=False,
                              env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    lines = shell_file.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "written by the shell"
    assert len(lines) == 2 and lines[1].startswith("error: "), lines
    assert stream in lines[1] and "own std" in lines[1] and lines[1].endswith(says)


def test_a_report_named_as_long_as_the_file_system_allows_is_written(tmp_path: Path) -> None:
    good_spec(tmp_path)
    name = "a" * 252 + ".md"
    result = run("report", "good.yaml", "-o", name, cwd=tmp_path)
    assert result.code == 0, result
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([name, "good.yaml"])


def test_report_all_never_writes_through_a_link_to_a_spec(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    spec = good_spec(folder)
    before = spec.read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    (out / "good.md").symlink_to(spec)
    line = error_line(run("report", "--all", "specs", "-o", "out", cwd=tmp_path), "good.md")
    assert "input" in line
    assert spec.read_bytes() == before
    assert sorted(path.name for path in out.iterdir()) == ["good.md"]  # no index either


# --- atomic writes ------------------------------------------------------------------------

@pytest.mark.parametrize(("command", "flag", "name"), [("report", "-o", "out.md"),
                                                       ("walk", "--save", "run.json")])
def test_a_write_that_fails_midway_keeps_the_old_file_and_leaves_no_temporary(
        command: str, flag: str, name: str, tmp_path: Path) -> None:
    good_spec(tmp_path)
    old = b"the user's file, which must survive\n" * 20
    (tmp_path / name).write_bytes(old)
    # Files can grow to 2 kB only: the report (and the session) are far larger, so the write
    # fails part-way with EFBIG, after the first 2 kB went to the temporary file.
    result = run(command, "good.yaml", flag, name, cwd=tmp_path, limit_file_bytes=2048)
    error_line(result, name)
    assert (tmp_path / name).read_bytes() == old
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["good.yaml", name])


def test_report_all_outputs_are_written_whole(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    good_spec(folder)
    out = tmp_path / "out"
    out.mkdir()
    (out / "good.md").write_text("old report\n", encoding="utf-8")
    result = run("report", "--all", "specs", "-o", "out", cwd=tmp_path, limit_file_bytes=2048)
    assert result.code == 2, result
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "good.md" in errors[0], result
    assert sorted(path.name for path in out.iterdir()) == ["good.md", "index.md"]
    assert (out / "good.md").read_text(encoding="utf-8") == "old report\n"
    assert "good.md" not in (out / "index.md").read_text(encoding="utf-8")


def test_report_all_reports_the_rest_around_a_report_it_cannot_write(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    # Reports of about 21 kB, 167 kB and 23 kB: files may grow to 100 kB, so b.md alone fails.
    shutil.copyfile(SPECS / "no_grad_backward.yaml", folder / "a.yaml")
    shutil.copyfile(SPECS / "column_backward.yaml", folder / "b.yaml")
    shutil.copyfile(SPECS / "vector_backward.yaml", folder / "c.yaml")
    result = run("report", "--all", "specs", "-o", "out", cwd=tmp_path,
                 limit_file_bytes=100_000)
    assert result.code == 2, result
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "b.md" in errors[0], result
    assert "wrote 2 report(s)" in result.stderr
    out = tmp_path / "out"
    assert sorted(path.name for path in out.iterdir()) == ["a.md", "c.md", "index.md"]
    index = (out / "index.md").read_text(encoding="utf-8")
    assert "(a.md)" in index and "(c.md)" in index and "b.md" not in index


# --- report --all collisions --------------------------------------------------------------

@pytest.mark.parametrize(("names", "clash"), [(("a.yaml", "a.yml"), "a.md"),
                                              (("index.yaml",), "index.md")])
def test_report_all_refuses_two_specs_for_one_report(
        names: tuple[str, ...], clash: str, tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    for name in names:
        good_spec(folder, name)
    line = error_line(run("report", "--all", "specs", "-o", "out", cwd=tmp_path), *names)
    assert clash in line
    assert not (tmp_path / "out").exists()  # refused before anything ran or was written


def test_report_all_counts_the_reports_it_wrote(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    good_spec(folder, "a.yaml")
    good_spec(folder, "b.yml")
    (folder / "bad.yaml").write_text("name: [\n", encoding="utf-8")
    result = run("report", "--all", "specs", "-o", "out", cwd=tmp_path)
    assert result.code == 2
    reports = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert reports == ["a.md", "b.md", "index.md"]
    assert f"wrote {len(reports) - 1} report(s)" in result.stderr


# --- nesting too deep for the YAML parser -------------------------------------------------

@pytest.mark.parametrize("command", ["validate", "walk", "report"])
def test_a_deeply_nested_spec_is_one_line(command: str, tmp_path: Path) -> None:
    (tmp_path / "deep.yaml").write_text(DEEP, encoding="utf-8")
    assert "nested too deeply" in error_line(run(command, "deep.yaml", cwd=tmp_path),
                                             "deep.yaml")


def test_report_all_reports_the_rest_around_a_deeply_nested_spec(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    good_spec(folder, "a.yaml")
    (folder / "b_deep.yaml").write_text(DEEP, encoding="utf-8")
    good_spec(folder, "c.yaml")
    result = run("report", "--all", "specs", "-o", "out", cwd=tmp_path)
    assert result.code == 2, result
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "b_deep.yaml" in errors[0] and "nested" in errors[0], errors
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "a.md", "c.md", "index.md"]


# --- stdout ----------------------------------------------------------------------------

@pytest.mark.parametrize("args", [("walk",), ("walk", "-f", "json"), ("diff",),
                                  ("diff", "-f", "json", "--pretty"), ("report",),
                                  ("validate",)])
def test_stdout_on_a_full_disk_is_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    good_spec(tmp_path)
    command = (f"'{sys.executable}' -m gradexplain {args[0]} good.yaml {' '.join(args[1:])} "
               "> /dev/full")
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=tmp_path,
                          timeout=TIMEOUT, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    line = error_line(Result(done.returncode, done.stdout, done.stderr), "stdout")
    assert "cannot write the output" in line


@pytest.mark.parametrize("args", [("walk",), ("walk", "-f", "json"),
                                  ("walk", "-f", "json", "--pretty"), ("report",)])
def test_a_reader_that_went_away_ends_the_output_quietly(args: tuple[str, ...],
                                                         tmp_path: Path) -> None:
    good_spec(tmp_path)
    process = subprocess.Popen([sys.executable, "-m", "gradexplain", args[0], "good.yaml",
                                *args[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before a byte is written: EPIPE for certain
    assert process.wait(timeout=TIMEOUT) == 0  # the run's own exit code: every check held
    assert process.stderr.read().decode() == ""


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("walk", "--help")])
def test_typers_own_output_on_a_full_disk_is_one_line(args: tuple[str, ...],
                                                       tmp_path: Path) -> None:
    # --help is written by typer itself, not through the CLI's own stdout writer.
    command = f"'{sys.executable}' -m gradexplain {' '.join(args)} > /dev/full"
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=tmp_path,
                          timeout=TIMEOUT, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    line = error_line(Result(done.returncode, done.stdout, done.stderr), "stdout")
    assert "cannot write the output" in line


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("walk", "--help")])
def test_typers_own_output_to_a_reader_that_went_away_is_quiet(args: tuple[str, ...],
                                                               tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-m", "gradexplain", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    process.wait(timeout=TIMEOUT)
    assert process.stderr.read().decode() == ""
