"""What a Python model prints, collected off stdout (gradexplain/user_output.py): bounded in
lines and line length, escaped, the rest counted, and `print()` really redirected; with
`captured_output`, sys.stderr and file descriptor 1 too, the descriptor put back however the
block ends."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from gradexplain.user_output import (
    MAX_LINE,
    MAX_LINES,
    PREFIX,
    ModelOutput,
    captured_output,
    captured_stdout,
    our_stderr,
)


def test_print_goes_to_the_collector_not_stdout() -> None:
    before = sys.stdout
    with captured_stdout() as printed:
        print("hello", 3)
        print("no newline", end="")
    assert sys.stdout is before
    assert printed.lines() == [f"{PREFIX}hello 3", f"{PREFIX}no newline"]


def test_lines_past_the_bound_are_counted_not_kept() -> None:
    output = ModelOutput()
    for number in range(MAX_LINES + 1000):
        output.write(f"line {number}\n")
    output.write("half a line")
    lines = output.lines()
    assert len(lines) == MAX_LINES + 1
    assert lines[0] == f"{PREFIX}line 0" and lines[MAX_LINES - 1].endswith(f"{MAX_LINES - 1}")
    assert "1,001 more line(s)" in lines[-1]  # 1000 whole lines and the unfinished one
    assert len(output.kept) == MAX_LINES


def test_many_lines_in_one_write_and_a_huge_line() -> None:
    output = ModelOutput()
    output.write("a\n" * 100 + "x" * 5_000_000)
    lines = output.lines()
    assert len(lines) == MAX_LINES + 1 and "61 more line(s)" in lines[-1]
    other = ModelOutput()
    other.write("y" * 5_000_000)
    other.write("y" * 5_000_000 + "\n")
    (line,) = other.lines()
    assert len(line) == len(PREFIX) + MAX_LINE + 3 and line.endswith("...")


def test_control_characters_and_surrogates_are_escaped() -> None:
    output = ModelOutput()
    output.write("\x1b]0;title\x07 \x1b[2J tab\there \udc80\r\n")
    (line,) = output.lines()
    assert "\x1b" not in line and "\x07" not in line and "\udc80" not in line
    assert "\\x1b]0;title\\x07" in line and "\\udc80" in line and "\t" in line
    line.encode("utf-8")  # printable on any terminal


def test_nothing_printed_gives_no_lines() -> None:
    with captured_stdout() as printed:
        pass
    assert printed.lines() == []


def test_the_descriptor_and_stderr_are_captured_then_put_back(
        capfd: pytest.CaptureFixture[str]) -> None:
    before = sys.stderr
    with captured_output() as printed:
        print("printed")
        sys.stderr.write("to stderr \x1b[2J\n")
        assert our_stderr() is before  # gradexplain's own messages still reach stderr
        os.write(1, b"to the descriptor\n")
        sys.__stdout__.write("unflushed")  # type: ignore[union-attr]
    os.write(1, b"after\n")
    # stderr is put back for this thread; a thread the user's code left writing goes nowhere
    sys.stderr.write("ours\n")
    late = threading.Thread(target=lambda: sys.stderr.write("a thread's \x1b[2J\n"))
    late.start()
    late.join()
    sys.stderr.flush()
    assert printed.lines() == [f"{PREFIX}printed", f"{PREFIX}to stderr \\x1b[2J",
                               f"{PREFIX}to the descriptor", f"{PREFIX}unflushed"]
    out, err = capfd.readouterr()
    assert out == "after\n"
    assert err == "ours\n"


def test_the_descriptor_is_put_back_when_the_block_raises(
        capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError), captured_output() as printed:
        os.write(1, b"said before failing \xff\n")
        raise ValueError
    os.write(1, b"after\n")
    assert printed.lines() == [f"{PREFIX}said before failing \\xff"]
    assert capfd.readouterr().out == "after\n"
