"""How output leaves the program (gradexplain/cli_output.py), in-process: pieces of JSON
printed as they are made stop being made once the reader went away; every byte reaches a stdout
that takes a part at a time; what stdout's encoding cannot hold is escaped."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import pytest

from gradexplain import cli_output
from gradexplain.errors import OutputError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


def test_pieces_stop_being_made_once_the_reader_went_away(
        monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[str] = []

    def write_whole(text: str, unencodable: str) -> None:
        if written:
            raise BrokenPipeError(32, "Broken pipe")
        written.append(text)

    monkeypatch.setattr(cli_output, "_write_whole", write_whole)
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
    def write_whole(text: str, unencodable: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli_output, "_write_whole", write_whole)
    monkeypatch.setattr(cli_output, "_drop_stdout", lambda: None)
    with pytest.raises(OutputError, match="No space left"):
        cli_output.show(iter(["{", "}\n"]))


class _Stingy(io.RawIOBase):
    """An unbuffered stdout (PYTHONUNBUFFERED=1) whose writes are partial, as a write to a full
    pipe is when the process is stopped and continued, and (with `refuses`) one that is
    non-blocking and full every other time it is written to."""

    def __init__(self, refuses: bool) -> None:
        self.taken = bytearray()
        self.refuses = refuses
        self.calls = 0
        self.always_writable = open(os.devnull, "wb")  # noqa: SIM115  # what select waits on

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer) -> int | None:
        self.calls += 1
        if self.refuses and self.calls % 2:
            return None
        piece = bytes(memoryview(data)[:1000])
        self.taken += piece
        return len(piece)

    def fileno(self) -> int:
        return self.always_writable.fileno()


@pytest.mark.parametrize("refuses", [False, True], ids=["partial writes", "non-blocking"])
def test_every_byte_reaches_an_unbuffered_stdout_that_takes_a_part_at_a_time(
        monkeypatch: pytest.MonkeyPatch, refuses: bool) -> None:
    raw = _Stingy(refuses)
    # Unbuffered, as Python makes stdout for PYTHONUNBUFFERED=1: the text layer on the raw file.
    unbuffered = io.TextIOWrapper(cast(Any, raw), encoding="utf-8", write_through=True)
    monkeypatch.setattr(sys, "stdout", unbuffered)
    document = {"labels": [f"∂loss/∂x{number}" for number in range(3000)]}
    text = json.dumps(document, ensure_ascii=False)
    cli_output.show(iter([text[:50_000], text[50_000:], "\n"]))
    cli_output.echo("∂z/∂t " * 5000)
    shown, echoed = raw.taken.decode("utf-8").split("\n", 1)
    assert json.loads(shown) == document
    assert echoed == "∂z/∂t " * 5000 + "\n"
    raw.always_writable.close()


def test_what_stdout_cannot_encode_is_escaped_and_json_still_parses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    taken = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(taken, encoding="latin-1"))
    document = {"label": "∂z/∂x", "beyond the BMP": "𝔏 😀", "latin-1": "é"}
    cli_output.show(iter([json.dumps(document, ensure_ascii=False), "\n"]))
    cli_output.echo("∂z/∂t é")
    shown, echoed = taken.getvalue().decode("latin-1").split("\n", 1)
    assert json.loads(shown) == document
    assert echoed == "\\u2202z/\\u2202t é\n"
