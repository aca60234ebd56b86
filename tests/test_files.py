"""gradexplain.files: reading only regular files within a bound, writing atomically, checking an
output before a run. The command-line side is tests/cli/test_hostile_files.py."""

from __future__ import annotations

import os
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradexplain import files
from gradexplain.errors import UsageError
from gradexplain.files import UnreadableFile, check_output, read_regular, write_atomic

OLD = b"old bytes the user had\n"


def names_in(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


# --- reading ------------------------------------------------------------------------------

def test_a_file_of_exactly_the_bound_is_read_and_one_byte_more_is_not(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_regular(path, 100) == b"x" * 100
    with pytest.raises(UnreadableFile) as refused:
        read_regular(path, 99)
    assert refused.value.kind == "too large"


def test_a_file_that_grew_after_its_stat_is_still_bounded(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "growing"
    path.write_bytes(b"x" * 5_000)
    # As if the stat had seen the file still small: only the bounded read stands in the way.
    monkeypatch.setattr(files, "regular_size", lambda *args: 0)
    with pytest.raises(UnreadableFile) as refused:
        read_regular(path, 1_000)
    assert refused.value.kind == "too large"


@pytest.mark.parametrize("make", ["folder", "fifo", "device", "dangling"])
def test_only_regular_files_are_read(make: str, tmp_path: Path) -> None:
    path = tmp_path / "x"
    if make == "folder":
        path.mkdir()
    elif make == "fifo":
        os.mkfifo(path)
    elif make == "device":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnreadableFile) as refused:
        read_regular(path, 1_000)
    expected = {"folder": "folder", "fifo": "not regular", "device": "not regular",
                "dangling": "missing"}
    assert refused.value.kind == expected[make]
    assert str(path) in str(refused.value)


# --- writing ------------------------------------------------------------------------------

@pytest.mark.parametrize("fails", ["fsync", "replace"])
@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
        fails: str, error: BaseException, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.md"
    target.write_bytes(OLD)

    def fail(*args: object) -> None:
        raise error

    monkeypatch.setattr(os, fails, fail)
    with pytest.raises(type(error)):
        write_atomic(target, "new text " * 10_000)
    monkeypatch.undo()
    assert target.read_bytes() == OLD
    assert names_in(tmp_path) == ["report.md"]


def test_a_signal_during_the_write_waits_until_the_file_is_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "run.json"
    target.write_bytes(OLD)
    real_fsync = os.fsync

    def interrupted(descriptor: int) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C (SIGTERM is held alike) mid-write
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", interrupted)
    # Another thread alive, as torch's workers are in a real run: the kernel may hand the
    # process's signal to it, so holding it in the main thread's signal mask is not enough.
    release = threading.Event()
    waiter = threading.Thread(target=release.wait)
    waiter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            write_atomic(target, "new text\n")
    finally:
        release.set()
        waiter.join()
    # The interrupt came, but only once the new file was whole and in place.
    assert target.read_text(encoding="utf-8") == "new text\n"
    assert names_in(tmp_path) == ["run.json"]


def test_text_that_cannot_be_encoded_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.write_bytes(OLD)
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "a lone surrogate \udc80")
    assert target.read_bytes() == OLD
    assert names_in(tmp_path) == ["report.md"]


def test_a_write_replaces_the_file_keeping_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.write_bytes(OLD)
    target.chmod(0o640)
    write_atomic(target, "new ✓\n")
    assert target.read_text(encoding="utf-8") == "new ✓\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert names_in(tmp_path) == ["report.md"]


@pytest.mark.parametrize("name", [b"a" * 252 + b".md",
                                  # 'é' is two bytes: the temporary name's cut splits one
                                  b"a" + "é".encode() * 125 + b".md",
                                  b"\xff" * 252 + b".md"])
def test_a_name_as_long_as_the_file_system_allows_is_written(name: bytes,
                                                              tmp_path: Path) -> None:
    assert len(name) <= 255
    target = tmp_path / os.fsdecode(name)
    check_output(target, "-o")
    write_atomic(target, "new\n")  # its temporary file's name must fit too
    assert target.read_text(encoding="utf-8") == "new\n"
    assert names_in(tmp_path) == [target.name]


def test_a_new_file_gets_the_permissions_a_plain_open_gives(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x", encoding="utf-8")
    write_atomic(tmp_path / "new", "x")
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


def test_a_symlink_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.md"
    real.write_bytes(OLD)
    link = tmp_path / "link.md"
    link.symlink_to(real)
    write_atomic(link, "new\n")
    assert link.is_symlink()
    assert real.read_text(encoding="utf-8") == "new\n"


# --- checking an output before the run -----------------------------------------------------

def test_an_output_is_never_an_input_under_another_name(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(OLD)
    (tmp_path / "hard.yaml").hardlink_to(spec)
    (tmp_path / "soft.yaml").symlink_to(spec)
    for name in ("spec.yaml", "hard.yaml", "soft.yaml"):
        with pytest.raises(UsageError, match="input"):
            check_output(tmp_path / name, "-o", [spec])
    check_output(tmp_path / "other.md", "-o", [spec])  # a new file beside it is fine
    (tmp_path / "copy.yaml").write_bytes(OLD)
    check_output(tmp_path / "copy.yaml", "-o", [spec])  # equal bytes, another file: fine


@pytest.mark.parametrize(("target", "says"), [("folder", "folder"), ("nowhere/x.md", "exist"),
                                              ("zero", "device")])
def test_an_output_that_cannot_be_written_is_named(target: str, says: str,
                                                   tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(UsageError, match=says):
        check_output(tmp_path / target, "--save")


def test_a_pipe_is_refused_under_a_name_that_resolves_nowhere(tmp_path: Path) -> None:
    # /dev/stdout on a pipe: its realpath is /proc/PID/fd/pipe:[N], which does not exist.
    read_end, write_end = os.pipe()
    try:
        path = Path(f"/dev/fd/{write_end}")
        assert not Path(os.path.realpath(path)).exists()
        with pytest.raises(UsageError, match="pipe") as refused:
            check_output(path, "-o", instead="leave out -o")
        assert str(refused.value).endswith("leave out -o")
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_dangling_symlink_names_the_folder_it_points_into(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.md").symlink_to(tmp_path / "gone" / "deeper" / "x.md")
    with pytest.raises(UsageError) as refused:
        check_output(tmp_path / "link.md", "-o")
    assert f"the folder {tmp_path / 'gone' / 'deeper'} does not exist" in str(refused.value)
    # A plain missing folder keeps the spelling the user gave.
    with pytest.raises(UsageError, match="the folder nowhere does not exist"):
        check_output(Path("nowhere/x.md"), "-o")


def test_a_write_in_pieces_that_fails_midway_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "walk.json"
    target.write_bytes(OLD)

    def pieces() -> Iterator[str]:
        yield '{"passes":['
        yield "1," * 100_000
        raise RuntimeError("a bug while making the document")

    with pytest.raises(RuntimeError):
        write_atomic(target, pieces())
    assert target.read_bytes() == OLD
    assert names_in(tmp_path) == ["walk.json"]
    write_atomic(target, iter(['{"passes":', "[1, 2]", "}\n"]))
    assert target.read_text(encoding="utf-8") == '{"passes":[1, 2]}\n'
    assert names_in(tmp_path) == ["walk.json"]
