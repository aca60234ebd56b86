"""How output leaves the program (gradexplain/cli_output.py), in-process: pieces of JSON
printed as they are made stop being made once the reader went away."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer

from gradexplain import cli_output
from gradexplain.errors import OutputError


def test_pieces_stop_being_made_once_the_reader_went_away(
        monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[str] = []

    def echo(text: str, nl: bool = True) -> None:
        if written:
            raise BrokenPipeError(32, "Broken pipe")
        written.append(text)

    monkeypatch.setattr(typer, "echo", echo)
    monkeypatch.setattr(cli_output, "_drop_stdout", lambda: None)  # pytest holds stdout
    made: list[int] = []

    def pieces() -> Iterator[str]:
        for number in range(10):
            made.append(number)
            yield "x" * (1 << 18)  # a write each

    cli_output.show(pieces())  # quietly: no error
    assert len(written) == 1
    assert made == [0, 1]  # the second piece failed to go out; no third was made


def test_a_full_disk_midway_is_the_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def echo(text: str, nl: bool = True) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(typer, "echo", echo)
    monkeypatch.setattr(cli_output, "_drop_stdout", lambda: None)
    with pytest.raises(OutputError, match="No space left"):
        cli_output.show(iter(["{", "}\n"]))
