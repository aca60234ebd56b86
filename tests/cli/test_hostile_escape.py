"""Hostile text in what we print and write (issue 19, escape): a spec, a saved session or the user's
own Python can hold terminal control sequences (`\\e]0;title\\a`, `\\e[2J`), C1 controls, line
separators, bidi marks and overrides, and lone surrogates. The real command line runs in a
subprocess and its raw bytes are read: no control byte but newline and tab, no C1 or bidi code
point, valid UTF-8 (a lone surrogate cannot be encoded, so it must have been escaped), and the
escaped form is shown.

The oracle is Python: the hostile strings are written here, and JSON output must parse back to
exactly them (escaping in JSON is JSON's own `\\u`, so no data is lost).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.cli import REPO, SPECS

# YAML double-quoted escapes, and the Python string they stand for.
HOSTILE_YAML = r"pwn\e]0;pwned\a\e[2J\u009b31m\u202e\u2066\x7f\u2028\u200fend"
HOSTILE = "pwn\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e\u2066\x7f\u2028\u200fend"
# What must be visible in every output that shows HOSTILE (markdown escapes the brackets).
SHOWN = ("pwn\\x1b", "pwned", "\\x07", "2J\\u009b31m\\u202e\\u2066\\u007f\\u2028\\u200fend")
MODULE = "mod\x1b[2J\x9b\u202e2"  # a module renamed by hand in a saved session
MODULE_SHOWN = "mod\\x1b[2J\\u009b\\u202e2"

UNSAFE_BYTES = {*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F}


def unsafe_code_point(character: str) -> bool:
    point = ord(character)
    return (0x80 <= point <= 0x9F or 0x202A <= point <= 0x202E or 0x2066 <= point <= 0x2069
            or point in (0x061C, 0x200B, 0x200E, 0x200F, 0x2028, 0x2029, 0x2060, 0xFEFF))


@dataclass(frozen=True)
class Run:
    code: int
    stdout: bytes
    stderr: bytes


def run(*args: str, cwd: Path = REPO) -> Run:
    """`python -m gradexplain ARGS` as a user runs it, its output as raw bytes."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-m", "gradexplain", *args], capture_output=True,
                          cwd=cwd, env=env, timeout=180, check=False)
    return Run(done.returncode, done.stdout, done.stderr)


def assert_safe(raw: bytes, *shown: str) -> str:
    """`raw` holds no control byte but newline and tab, is UTF-8, has no C1 or bidi code point,
    and shows each of `shown`; the decoded text."""
    assert not UNSAFE_BYTES & set(raw), sorted(UNSAFE_BYTES & set(raw))
    text = raw.decode("utf-8")  # strict: a lone surrogate would not have been encodable
    assert not [hex(ord(c)) for c in text if unsafe_code_point(c)]
    for part in shown:
        assert part in text, (part, text[:2000])
    return text


def assert_one_error_line(result: Run, *shown: str) -> str:
    assert result.code == 2, result
    assert result.stdout == b""
    line = assert_safe(result.stderr, *shown)
    assert "Traceback" not in line and "internal error" not in line
    assert line.endswith("\n") and line.count("\n") == 1, line
    assert line.startswith("error: ")
    return line


def strings_in(data: object) -> list[str]:
    """Every string in a JSON document, keys included."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, list):
        return [text for item in data for text in strings_in(item)]
    if isinstance(data, dict):
        return [text for key, value in data.items() for text in (key, *strings_in(value))]
    return []


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def hostile_spec(folder: Path) -> Path:
    """specs/two_modules.yaml with a hostile `name:` and `about:`."""
    text = (SPECS / "two_modules.yaml").read_text(encoding="utf-8")
    head, rest = text.split("seed:", 1)
    path = folder / "hostile.yaml"
    path.write_text(f'name: "{HOSTILE_YAML}"\nabout: "about {HOSTILE_YAML}"\nseed:{rest}',
                    encoding="utf-8")
    assert head.startswith("name: two_modules")
    return path


@pytest.fixture(scope="module")
def walked(folder: Path, hostile_spec: Path) -> tuple[Run, Path]:
    """`walk` of the hostile spec (text, piped), saving its session: the one capture here."""
    saved = folder / "hostile.json"
    return run("walk", str(hostile_spec), "--save", str(saved)), saved


def renamed_in(data: object) -> object:
    """`data` with module2 renamed to MODULE in every string, keys included."""
    if isinstance(data, str):
        return data.replace("module2", MODULE)
    if isinstance(data, list):
        return [renamed_in(item) for item in data]
    if isinstance(data, dict):
        return {renamed_in(key): renamed_in(value) for key, value in data.items()}
    return data


@pytest.fixture(scope="module")
def renamed(folder: Path, walked: tuple[Run, Path]) -> Path:
    """The saved session edited by hand: module2 renamed to a hostile name everywhere."""
    edited = renamed_in(json.loads(walked[1].read_text(encoding="utf-8")))
    assert "module2" not in json.dumps(edited)
    path = folder / "renamed.json"
    path.write_text(json.dumps(edited), encoding="utf-8")
    return path


def test_validate_shows_the_name_escaped(hostile_spec: Path) -> None:
    result = run("validate", str(hostile_spec))
    assert result.code == 0, result
    # validate prints the name itself, before rich: even the BEL shows.
    assert_safe(result.stdout,
                "pwn\\x1b]0;pwned\\x07\\x1b[2J\\u009b31m\\u202e\\u2066\\u007f\\u2028\\u200fend")


def test_walk_text_and_its_saved_session(walked: tuple[Run, Path]) -> None:
    result, saved = walked
    assert result.code == 0, result
    assert_safe(result.stdout, *SHOWN)
    assert_safe(result.stderr)
    # The session keeps the name exactly: escaped as JSON's own \u, not changed.
    document = json.loads(assert_safe(saved.read_bytes()))
    assert document["session"]["walk"]["name"] == HOSTILE


@pytest.mark.parametrize("command", ["walk", "diff"])
@pytest.mark.parametrize("output_format", ["text", "markdown", "json"])
def test_walk_and_diff_of_the_saved_session(walked: tuple[Run, Path], renamed: Path,
                                           command: str, output_format: str) -> None:
    for saved, shown in ((walked[1], SHOWN), (renamed, (MODULE_SHOWN,))):
        result = run(command, "--load", str(saved), "-f", output_format)
        assert result.code == 0, result
        if output_format == "json":
            # JSON is still JSON and says exactly what the session says.
            strings = " ".join(strings_in(json.loads(assert_safe(result.stdout))))
            if saved == renamed:  # (JSON has no spec name)
                assert MODULE in strings
        elif command == "walk" or saved == renamed:  # diff shows modules, not the spec's name
            assert_safe(result.stdout, *shown)
        assert_safe(result.stderr)


def test_report_on_stdout_and_in_a_file(folder: Path, walked: tuple[Run, Path],
                                        renamed: Path) -> None:
    for saved, shown in ((walked[1], SHOWN), (renamed, (MODULE_SHOWN,))):
        printed = run("report", "--load", str(saved))
        assert printed.code == 0, printed
        text = assert_safe(printed.stdout, *shown)
        report = folder / f"{saved.stem}.md"
        written = run("report", "--load", str(saved), "-o", str(report))
        assert written.code == 0, written
        assert_safe(written.stderr)
        assert report.read_bytes() == text.encode("utf-8")


def test_an_error_line_quoting_a_hostile_key_or_value(folder: Path) -> None:
    base = (SPECS / "two_modules.yaml").read_text(encoding="utf-8")
    cases = {
        "key.yaml": base + '"bad\\e[2J\\u009bkey": 1\n',
        "value.yaml": base.replace("seed: 0", 'seed: "\\e]0;t\\a\\e[2J\\u202e"'),
        "layer.yaml": base.replace("activation: Sigmoid", 'activation: "Sig\\e[2Jmoid"'),
        "back\x1b[2J\u202e.yaml": base.replace("backward: z", 'backward: "z\\e[2J\\u2066"'),
    }
    for name, text in cases.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        for command in ("validate", "walk"):
            result = run(command, str(path))
            shown_name = name.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e")
            assert_one_error_line(result, shown_name, "\\x1b[2J")


def test_an_error_line_naming_a_hostile_file(folder: Path) -> None:
    session = folder / "s\x1b]0;t\x07\n\u202e.json"
    session.write_text('{"schema": "nope"}', encoding="utf-8")
    line = assert_one_error_line(run("walk", "--load", str(session)),
                                 "s\\x1b]0;t\\x07\\x0a\\u202e.json")
    assert "session" in line
    missing = folder / "missing\x1b[2J.yaml"
    line = assert_one_error_line(run("validate", str(missing)), "missing\\x1b[2J.yaml")


def test_a_lone_surrogate_in_a_saved_session(folder: Path, walked: tuple[Run, Path]) -> None:
    """A session whose name holds a lone surrogate (JSON `"\\ud800"` is valid JSON): shown
    escaped in text, markdown and the report, and saved again unchanged."""
    document = json.loads(walked[1].read_text(encoding="utf-8"))
    document["session"]["walk"]["name"] = "half \ud800 pair"
    edited = folder / "surrogate_session.json"
    edited.write_text(json.dumps(document), encoding="utf-8")
    for output_format in ("text", "markdown"):
        result = run("walk", "--load", str(edited), "-f", output_format)
        assert result.code == 0, result
        assert_safe(result.stdout, "half \\ud800 pair")
    report = folder / "surrogate_session.md"
    assert run("report", "--load", str(edited), "-o", str(report)).code == 0
    assert_safe(report.read_bytes(), "half \\ud800 pair")
    again = folder / "surrogate_session_again.json"
    result = run("walk", "--load", str(edited), "-f", "json", "--save", str(again))
    assert result.code == 0, result
    json.loads(assert_safe(result.stdout))
    assert json.loads(assert_safe(again.read_bytes())) == document

# --- the user's own Python: an extra_repr with a lone surrogate or control sequences ---------

MODEL = '''
from torch import nn


class Odd(nn.Module):
    def __init__(self, text):
        super().__init__()
        self.l = nn.Linear(3, 2)
        self.text = text

    def extra_repr(self):
        return self.text

    def forward(self, x):
        return self.l(x).tanh()


def surrogate():
    return Odd("bad \\ud800 here")


def control():
    return Odd("ctl " + {hostile!r})
'''


@pytest.mark.parametrize(("factory", "extra", "shown"), [
    ("surrogate", "bad \ud800 here", ("bad \\ud800 here",)),
    ("control", "ctl " + HOSTILE, ("ctl pwn\\x1b]0;pwned\\x07\\x1b[2J\\u009b31m",)),
])
def test_an_extra_repr_is_saved_and_reported(folder: Path, factory: str, extra: str,
                                             shown: tuple[str, ...]) -> None:
    """`--save`, JSON and `report -o` of a model whose extra_repr cannot be printed as it is:
    the session keeps it exactly (JSON's `\\u`), the report shows it escaped, no file is left
    empty."""
    model = folder / "odd_model.py"
    model.write_text(MODEL.format(hostile=HOSTILE), encoding="utf-8")
    saved = folder / f"{factory}.json"
    result = run("walk", f"{model}:{factory}", "--input", "4x3", "-f", "json", "--save",
                 str(saved))
    assert result.code == 0, result
    json.loads(assert_safe(result.stdout))
    assert_safe(result.stderr)
    session = json.loads(assert_safe(saved.read_bytes()))
    assert f"Odd(\n  {extra}\n" in session["session"]["spec_text"]
    report = folder / f"{factory}.md"
    written = run("report", "--load", str(saved), "-o", str(report))
    assert written.code == 0, written
    text = assert_safe(report.read_bytes(), *shown)
    printed = run("report", "--load", str(saved))
    assert printed.stdout == text.encode("utf-8")
