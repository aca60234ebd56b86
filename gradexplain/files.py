"""The user's files, read and written safely: the one place that opens a file we read (a spec, a
saved session, an `--inputs` file) and the one that writes one (`-o`, `--save`, `report --all`).

Reading takes regular files only, within a size bound: a FIFO, `/dev/zero` or a folder is
refused from its `stat` before anything is read (a FIFO would block, a device never ends), and at
most bound + 1 bytes are read, so a file that grows while it is read cannot blow the bound.

Writing is atomic: the text goes to a temporary file beside the target, then `os.replace`s it,
so a reader sees the old file or the new one, never a part, and on any failure (an encoding
error, a full disk, Ctrl-C) the temporary file is removed and the old target keeps its bytes.
`check_output` says before a run whether its output can be written at all, and that it is no
input of the run. No torch, no YAML here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from gradexplain.errors import BadInput, UsageError

# The most an `--inputs` file (torch.save'd tensors for a Python model's forward) may be.
MAX_INPUTS_BYTES = 256 * 2**20

# How a non-regular file is named to the user, by the `stat.S_IS*` test that finds it.
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a pipe (FIFO)"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


class UnreadableFile(BadInput):
    """A file that cannot be read as asked: missing, not a regular file, over its bound or not
    readable. `kind` says which ("missing", "folder", "not regular", "too large", "unreadable"),
    for callers that turn it into their own error (a spec's, a session's); `reason` is the
    words after the file's name; `size`, for a file too large, its size when known (a file
    that grew while it was read is known only to be over the bound)."""

    def __init__(self, file: str, kind: str, reason: str, size: int | None = None) -> None:
        super().__init__(f"{file}: {reason}")
        self.file = file
        self.kind = kind
        self.reason = reason
        self.size = size


def _kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_size(path: Path, limit: int, file: str | None = None) -> int:
    """The size of `path` when it is a regular file (a symlink to one is fine) of at most
    `limit` bytes; UnreadableFile otherwise. Nothing is opened."""
    name = file or str(path)
    try:
        info = os.stat(path)
    except OSError as error:
        raise _unreadable(error, path, name) from None
    _check_mode(info, name)
    _check_size(info.st_size, limit, name, exact=True)
    return info.st_size


def read_regular(path: Path, limit: int, file: str | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; UnreadableFile otherwise."""
    name = file or str(path)
    regular_size(path, limit, name)
    # O_NONBLOCK: should the path have become a FIFO since the stat, opening it cannot block.
    flags = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
             | getattr(os, "O_BINARY", 0))
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        raise _unreadable(error, path, name) from None
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        _check_mode(os.fstat(descriptor), name)  # the file opened, not the one stat'ed
        chunks: list[bytes] = []
        size = 0
        try:
            while size <= limit:
                chunk = handle.read(min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as error:
            raise _unreadable(error, path, name) from None
    _check_size(size, limit, name, exact=False)
    return b"".join(chunks)


def _check_mode(info: os.stat_result, name: str) -> None:
    if stat.S_ISREG(info.st_mode):
        return
    kind = _kind_of(info.st_mode)
    what = "folder" if kind == "a folder" else "not regular"
    raise UnreadableFile(name, what, f"is {kind}, not a regular file: give a file")


def _check_size(size: int, limit: int, name: str, exact: bool) -> None:
    if size > limit:
        what = f"{size:,} bytes" if exact else f"over {limit:,} bytes"
        raise UnreadableFile(name, "too large", f"the file is {what}; at most {limit:,} bytes "
                             "are read", size if exact else None)


def _unreadable(error: OSError, path: Path, name: str) -> UnreadableFile:
    if isinstance(error, FileNotFoundError | NotADirectoryError):
        if os.path.islink(path):
            return UnreadableFile(name, "missing", "is a symbolic link to a file that does "
                                  "not exist")
        return UnreadableFile(name, "missing", "the file does not exist")
    if isinstance(error, PermissionError):
        return UnreadableFile(name, "unreadable", "cannot be read: permission denied (check "
                              "its permissions)")
    return UnreadableFile(name, "unreadable", f"cannot be read: {error.strerror or error}")


def check_output(path: Path, flag: str, inputs: Iterable[Path | None] = (),
                 instead: str = "give a file name to write") -> None:
    """Before a run: `path` can be written by `write_atomic` (its folder exists and is
    writable, it is no folder, device or pipe) and is none of the run's `inputs` (symlinks
    and hard links count: never write over what was read). UsageError naming `flag` if not;
    `instead` says what to do about a path that is no regular file (`/dev/stdout`)."""
    where = f"{flag} {path}: cannot write it"
    # The path itself is stat'ed, not its realpath: /dev/stdout's realpath on a pipe is
    # /proc/PID/fd/pipe:[N], which does not exist, and the write would fail after the run.
    try:
        mode: int | None = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(f"{where}: is {_kind_of(mode)}, not a regular file: {instead}")
    target = Path(os.path.realpath(path))
    folder = target.parent
    # The folder as the user wrote it, unless a symlink leads elsewhere: then the real one.
    shown = path.parent if Path(os.path.realpath(path.parent)) == folder else folder
    if not folder.is_dir():
        raise UsageError(f"{where}: the folder {shown} does not exist (make it first)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: the folder {shown} is not writable (permission denied)")
    for given in inputs:
        if given is not None and mode is not None and _same_file(target, given):
            raise UsageError(f"{where}: is {given}, an input of this run; write the output "
                             "to another file")
    for descriptor, stream in ((1, "stdout"), (2, "stderr")):
        if mode is not None and _is_open_as(path, descriptor):
            # Written whole through a rename, the file would be replaced, not written to:
            # what the shell wrote to it before (and after) would be gone.
            raise UsageError(f"{where}: is this command's own {stream}, a file the shell "
                             f"opened for it, which writing would replace: {instead}")


def fixed_path(path: Path) -> Path:
    """`path` made absolute now, against the working directory it was given in: a model's code
    runs before the output is written and may change the working directory (`os.chdir`), and a
    relative path would then name another file, perhaps the model's own."""
    return Path(os.path.abspath(path))


def check_output_folder(folder: Path, flag: str) -> None:
    """A folder to write files into (`report --all -o FOLDER`): made if missing, and
    writable, before anything runs. UsageError naming `flag` if not."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{flag} {folder}: not a folder (--all writes a report per spec and "
                         "an index into a folder)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"{flag} {folder}: cannot make the folder ({error.strerror})") from error
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {folder}: cannot write in the folder (permission denied)")


def _is_open_as(path: Path, descriptor: int) -> bool:
    """Whether `path` is the file open as file descriptor `descriptor` (stdout, stderr)."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(descriptor))
    except OSError:
        return False


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def write_atomic(path: Path, text: str | Iterable[str]) -> None:
    """Write `text` (UTF-8) to `path` all at once: a temporary file beside it, then a rename.
    `text` may come in pieces, each written as it is made (a JSON document too big to hold
    whole): SIGINT and SIGTERM then wait for the last piece too. A symlink is written through
    to its target. OSError or UnicodeError (or whatever making a piece raised) if it cannot
    be, with the temporary file removed and the old `path` as it was."""
    import tempfile  # here: `validate` reads specs and never writes, and starts fast

    # Text whole is encoded before any file is made: a lone surrogate fails here.
    pieces: Iterable[bytes] = ([text.encode("utf-8")] if isinstance(text, str)
                               else (piece.encode("utf-8") for piece in text))
    target = Path(os.path.realpath(path))
    with _signals_held():
        descriptor, temporary = tempfile.mkstemp(dir=target.parent,
                                                 prefix=f".{_temporary_stem(target)}.",
                                                 suffix=".tmp")
        try:
            with os.fdopen(descriptor, "wb") as handle:
                for data in pieces:
                    handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temporary, _mode_for(target))
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


# The most of the target's name a temporary file's name repeats, in bytes: a name may be 255
# bytes long (NAME_MAX), and the temporary one adds 14 to it (`.`, `.XXXXXXXX.tmp`).
_TEMPORARY_STEM = 64


def _temporary_stem(target: Path) -> str:
    """The start of the target's name, for its temporary file: a reader of the folder sees
    whose it is, and its name fits wherever the target's does. Cut as bytes and decoded
    back the way the file system will encode it, so a character cut in two stays its bytes."""
    return os.fsdecode(os.fsencode(target.name)[:_TEMPORARY_STEM])


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT wait until the file is written and renamed (then act as ever): a
    kill mid-write would leave the temporary file behind. Python's own handlers are swapped
    for one that remembers the signal, not the thread's signal mask: torch's worker threads
    do not block it, and the kernel hands a process signal to any thread that does not.
    Only the main thread can set handlers; elsewhere the write goes on without."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def remember(number: int, _frame: object) -> None:
        arrived.append(number)

    previous = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    # A handler set outside Python (getsignal gives None) cannot be put back: left alone.
    held = [number for number, handler in previous.items() if handler is not None]
    for number in held:
        signal.signal(number, remember)
    try:
        yield
    finally:
        for number in held:
            signal.signal(number, previous[number])
        for signal_number in dict.fromkeys(arrived):
            signal.raise_signal(signal_number)


def _mode_for(target: Path) -> int:
    """The permissions the written file gets: the old file's, or what a plain open would give
    (mkstemp's 0600 would hide a report from the rest of the group)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


__all__ = ["MAX_INPUTS_BYTES", "UnreadableFile", "check_output", "check_output_folder",
           "read_regular", "regular_size", "write_atomic"]
