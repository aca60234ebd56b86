"""Running one function in N forked processes joined in one gloo process group on 127.0.0.1,
and bringing back what each returned: the launcher behind `walk --ranks N` (issue 21). This is
the parent's side; rank.py is what a rank does once forked.

Why fork, in this order (../shared/reference/ddp-hook-facts.md, "Timing"): a rank that imports
torch for itself costs seconds, and DDP's constructor imports all of `torch._dynamo` on first
use (2.5 s, and 4-7 s a rank when two do it at once on 2 cores). So the parent imports both
once, then serves the rendezvous store itself on 127.0.0.1, on a port the OS picks (no port is
guessed, so none is raced for), and forks the ranks. The parent runs no torch op here, but its
caller may have: torch's OpenMP threads do not survive a fork, so a rank computes with one
thread unless told otherwise (a rank told to use more hangs in its first parallel op if the
parent has computed with more than one thread; the timeout ends it).

The parent reads every rank's pipe while the ranks run, so a large result never leaves a rank
blocked on a full pipe, and waits on their exits. A rank that ends badly after its whole
result has succeeded (a note says how it ended). The first rank to fail ends the run: the
others are sent SIGTERM, then SIGKILL after a short grace (one may be blocked in a collective
that will never complete), all are reaped, and one error names the rank that failed first and
why. The timeout stops the ranks still without a result. No rank, pipe or port outlives
`launch`, whether it returns or raises.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from gradexplain.distributed import MAX_RANKS
from gradexplain.distributed.rank import (
    BROKEN,
    RAISED,
    RESULT,
    Raised,
    RankContext,
    RankPlan,
    record_kind,
    record_payload,
    run_rank,
)
from gradexplain.errors import (
    GradexplainError,
    RankFailed,
    RanksTimedOut,
    UsageError,
    quoted,
    show_number,
)
from gradexplain.threads import DEFAULT_THREADS, check_threads

if TYPE_CHECKING:
    from torch._C._distributed_c10d import TCPStore

# Each rank is a process with torch loaded, on a 2-core machine; every hook question shows
# with 2 ranks. More than 8 is a typo rather than a model to explain.
# Seconds. A 2-rank walk of a spec takes a few; this is a hang, not a slow model. A day is
# the most a timeout may be: more is a typo (and past timedelta's range, a traceback).
DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 86_400.0
# Imported by the parent before it forks, so that no rank imports them for itself.
PRELOADED = ("torch.distributed", "torch._dynamo")

_TERM_GRACE = 1.0  # seconds a rank gets between SIGTERM and SIGKILL
_TEARDOWN_GRACE = 5.0  # seconds the ranks' teardown may take once every result is in
_POLL = 0.05  # seconds between looks at the ranks' exits where there is no pidfd to wait on
_TAIL = 2000  # characters of a rank's stderr kept for its error
# A rank's wait status where the system reaped it (the caller ignores SIGCHLD): how it ended
# is not known.
_UNKNOWN = -1


@dataclass(frozen=True)
class LaunchReport:
    """What the ranks returned, rank by rank; `notes` say how a rank ended badly after it had
    sent its whole result (which still counts: the result was complete)."""

    results: tuple[bytes, ...]
    notes: tuple[str, ...] = ()


def check_ranks(world_size: object, what: str) -> None:
    """A UsageError naming `what` (the option or parameter the user gave) unless `world_size`
    is a whole number from 1 to MAX_RANKS."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not (
            1 <= world_size <= MAX_RANKS):
        raise UsageError(f"{what} {_shown(world_size)}: give a whole number of ranks "
                         f"from 1 to {MAX_RANKS}")


def _shown(value: object) -> str:
    """A value the caller gave, as an error quotes it (a 5,000-digit int by its size)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return show_number(value)
    return repr(value)


def run_ranks(world_size: int, work: Callable[[RankContext], bytes], *,
              timeout: float = DEFAULT_TIMEOUT) -> tuple[bytes, ...]:
    """Run `work` once in each of `world_size` forked processes joined in one gloo process group
    on 127.0.0.1; return what each rank's `work` returned, rank by rank."""
    return launch(world_size, work, timeout=timeout).results


def launch(world_size: int, work: Callable[[RankContext], bytes], *,
           timeout: float = DEFAULT_TIMEOUT, threads: int = DEFAULT_THREADS) -> LaunchReport:
    """`run_ranks` with how the ranks ended: each rank computes with `threads` threads (more
    than one only from a process that has not computed with more: the module's docstring
    says why); past `timeout` seconds the ranks without a result are stopped (RanksTimedOut).
    A rank that raises or dies is RankFailed, after the other ranks were stopped."""
    check_ranks(world_size, "world_size")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            0 < timeout <= MAX_TIMEOUT):
        raise UsageError(f"timeout {_shown(timeout)}: give a number of seconds above 0, "
                         f"at most {MAX_TIMEOUT:,g}")
    check_threads(threads, "threads")
    for name in PRELOADED:
        __import__(name)
    deadline = time.monotonic() + timeout
    store = _master_store()
    ranks: list[_Rank] = []
    try:
        plan = RankPlan(world_size, store.port, timeout, threads, os.getpid(),
                        _loopback_interface())
        for rank in range(world_size):
            _start(rank, plan, work, ranks)
        return _gather(ranks, deadline, timeout)
    finally:
        try:
            _stop(ranks)
        finally:  # even when a second Ctrl-C cuts the stopping short
            for started in ranks:
                started.close_fds()
                started.stderr.close()
            # The store's last reference, gone now: a traceback keeps this frame's locals.
            del store


def _master_store() -> TCPStore:
    """The rendezvous store, served by this process on 127.0.0.1, on a port the OS picks. The
    store is handed a socket already listening: given a host name alone, it listens on every
    interface, where anyone on the network could write to it during the run."""
    from torch._C._distributed_c10d import TCPStore

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        fd = listening.detach()
    try:
        # The store owns the descriptor from here on, and closes it when it is destroyed.
        return TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                        master_listen_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise


def _loopback_interface() -> str | None:
    """The loopback interface's name. gloo listens on the address the host's name resolves to
    unless GLOO_SOCKET_IFNAME names an interface, and that address may face the network."""
    try:
        names = {name for _, name in socket.if_nameindex()}
    except OSError:
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


@dataclass
class _Rank:
    """A started rank as the parent follows it: what it has sent so far, and once it has
    ended, its wait status. Mutable: it fills in while the rank runs."""

    rank: int
    pid: int
    pipe: int | None  # the read end of its pipe, None once closed
    stderr: IO[bytes]
    exit_fd: int | None  # a pidfd readable once it exits, where the system has them
    received: bytearray = field(default_factory=bytearray)
    status: int | None = None  # os.waitpid's once reaped, or _UNKNOWN
    sent: list[signal.Signals] = field(default_factory=list)  # the signals the parent sent it
    # Its pipe closed before the parent sent it any signal: it was ending by itself. Where
    # SIGCHLD is ignored its wait status is lost, and this alone tells it from a rank stopped.
    closed_unprompted: bool = False

    def kind(self) -> bytes | None:
        """What it sent (RESULT or RAISED), once the whole record is in; else None."""
        return record_kind(self.received)

    def has_result(self) -> bool:
        return self.kind() == RESULT

    def failed(self) -> bool:
        """It sent what it raised, or ended without a whole record."""
        kind = self.kind()
        return kind == RAISED if kind else self.status is not None

    def watched(self) -> tuple[int, ...]:
        return tuple(fd for fd in (self.pipe, self.exit_fd) if fd is not None)

    def read(self) -> None:
        """Whatever its pipe holds now; the pipe is closed at its end."""
        while self.pipe is not None:
            try:
                chunk = os.read(self.pipe, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                os.close(self.pipe)
                self.pipe = None
                self.closed_unprompted = not self.sent
            self.received += chunk

    def reap(self, block: bool) -> None:
        """Its wait status, if it has ended (or once it has, with `block`); then what it wrote
        before it ended, which may still be in the pipe."""
        if self.status is not None:
            return
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:  # SIGCHLD ignored: the system reaped it
            pid, status = self.pid, _UNKNOWN
        if pid == 0:
            return
        self.status = status
        self.read()
        self.close_fds()

    def send(self, number: signal.Signals) -> None:
        if self.status is None:
            self.sent.append(number)
            os.kill(self.pid, number)

    def stopped(self) -> bool:
        """The parent's signal ended it. One sent a signal as it was ending by itself (it
        exited, or a signal the parent had not sent killed it) was not stopped: its end is
        what made its peers raise, and it is the rank that failed."""
        if self.status is None or self.status == _UNKNOWN:
            return bool(self.sent) and not self.closed_unprompted
        return os.WIFSIGNALED(self.status) and os.WTERMSIG(self.status) in self.sent

    def close_fds(self) -> None:
        for fd in self.watched():
            os.close(fd)
        self.pipe = self.exit_fd = None

    def stderr_tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):  # ValueError: closed already
            self.stderr.seek(max(0, self.stderr.seek(0, os.SEEK_END) - 4 * _TAIL))
            return self.stderr.read().decode("utf-8", "replace")[-_TAIL:]
        return ""

    def stderr_said(self) -> str:
        """The last line it wrote on stderr, quoted after a semicolon; "" if none."""
        lines = self.stderr_tail().strip().splitlines()
        return f"; its stderr ended {quoted(lines[-1], 200)}" if lines else ""

    def ending(self) -> tuple[str, str]:
        """How it ended: a kind ("exit", or the signal's name) and the words that say it
        ("exited with code 3", "was killed by SIGKILL")."""
        if self.status is None or self.status == _UNKNOWN:
            return "exit", "ended"
        code = os.waitstatus_to_exitcode(self.status)
        if code >= 0:
            return "exit", f"exited with code {code}"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return name, f"was killed by {name}"


def _start(rank: int, plan: RankPlan, work: Callable[[RankContext], bytes],
           ranks: list[_Rank]) -> None:
    """Fork rank `rank` and add it to `ranks`. Ctrl-C is held back until it is there, or it
    would run on unknown to `launch`; SIGINT and SIGTERM are blocked across the fork, so that
    neither can raise in the child before it is in the code that ends it with os._exit."""
    with contextlib.ExitStack() as undo:  # what was opened, closed if the fork fails
        stderr = undo.enter_context(tempfile.TemporaryFile())
        read_end, write_end = os.pipe()
        undo.callback(os.close, read_end)
        undo.callback(os.close, write_end)
        # Python 3.12+ warns about forking a process with threads: the store's server is one,
        # and a rank takes none of its locks.
        with _interrupts_held(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                pid = os.fork()
                if pid == 0:
                    try:
                        inherited = [fd for known in ranks
                                     for fd in (*known.watched(), known.stderr.fileno())]
                        for fd in (*inherited, read_end):
                            os.close(fd)
                        run_rank(RankContext(rank, plan.world_size), plan, work, mask,
                                 write_end, stderr.fileno())
                    finally:
                        os._exit(BROKEN)
                undo.pop_all()
                os.close(write_end)
                os.set_blocking(read_end, False)
                ranks.append(_Rank(rank, pid, read_end, stderr, _exit_fd(pid)))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C held back until the block ends, then raised as it would have been. Only the main
    thread is interrupted, and only it can set a handler: elsewhere nothing is held."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is None):  # None: set outside Python
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: held.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


def _exit_fd(pid: int) -> int | None:
    """A file descriptor that becomes readable when `pid` exits (Linux 5.3+), else None."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(pid)
    except OSError:
        return None
    return fd


def _gather(ranks: list[_Rank], deadline: float, timeout: float) -> LaunchReport:
    """Read and reap the ranks until every one has ended, one has failed or the time is up."""
    until = deadline
    while not any(rank.failed() for rank in ranks):
        if all(rank.status is not None for rank in ranks):
            break
        now = time.monotonic()
        if all(rank.has_result() for rank in ranks):
            until = min(until, now + _TEARDOWN_GRACE)
        if now >= until:
            break
        _wait(ranks, until - now)
    missing = tuple(rank.rank for rank in ranks if not rank.has_result())
    failed = any(rank.failed() for rank in ranks)
    _stop(ranks)
    if failed:
        raise _failure(ranks)
    if missing:
        raise RanksTimedOut(missing, timeout)
    return LaunchReport(tuple(record_payload(rank.received) for rank in ranks), tuple(
        _note(rank) for rank in ranks if rank.stopped() or rank.status not in (0, _UNKNOWN)))


def _note(rank: _Rank) -> str:
    """How a rank ended badly after it sent its result."""
    if rank.stopped():
        return (f"rank {rank.rank} was stopped: its teardown had not ended "
                f"{_TEARDOWN_GRACE:g} s after every rank had sent its result")
    return f"rank {rank.rank} {rank.ending()[1]} after it sent its result{rank.stderr_said()}"


def _wait(ranks: list[_Rank], seconds: float) -> None:
    """Up to `seconds` for a rank's pipe to have data or a rank to exit; then read what the
    pipes hold and reap the ranks that have ended."""
    running = [rank for rank in ranks if rank.status is None]
    if any(rank.exit_fd is None for rank in running):
        seconds = min(seconds, _POLL)
    with selectors.DefaultSelector() as selector:
        for rank in running:
            for fd in rank.watched():
                selector.register(fd, selectors.EVENT_READ)
        selector.select(max(seconds, 0))
    for rank in running:
        rank.read()
        rank.reap(block=False)


def _stop(ranks: list[_Rank]) -> None:
    """Every rank still running stopped and reaped: SIGTERM, then SIGKILL after a grace."""
    for rank in ranks:
        rank.read()  # a pipe closed by now was closed by the rank ending, not by a signal
        rank.reap(block=False)
    for rank in ranks:
        rank.send(signal.SIGTERM)
    end = time.monotonic() + _TERM_GRACE
    while any(rank.status is None for rank in ranks) and time.monotonic() < end:
        _wait(ranks, end - time.monotonic())
    for rank in ranks:
        rank.send(signal.SIGKILL)
        rank.reap(block=True)


def _failure(ranks: list[_Rank]) -> RankFailed:
    """The error for the rank that failed first. A rank that died by itself comes before any
    that raised (its peers raise because it is gone); among those that raised, the one whose
    record was made first."""
    died = [rank for rank in ranks
            if rank.failed() and rank.kind() is None and not rank.stopped()]
    raised = [(Raised.decode(record_payload(rank.received)), rank) for rank in ranks
              if rank.kind() == RAISED]
    if died or not raised:
        rank = (died or [rank for rank in ranks if rank.failed()])[0]
        kind, ended = rank.ending()
        return RankFailed(rank.rank, f"it {ended} before it sent its result"
                          f"{rank.stderr_said()}", kind=kind, stderr_tail=rank.stderr_tail())
    said, rank = min(raised, key=lambda pair: pair[0].at)
    error_class = _error_class(said.error_class)
    reason = said.message if error_class else f"{said.kind}: {said.message}"
    return RankFailed(rank.rank, reason, kind=said.kind, exit_code=said.exit_code,
                      error_class=error_class, stderr_tail=rank.stderr_tail())


def _error_class(name: str | None) -> type[GradexplainError] | None:
    """The gradexplain error class a rank's record names ("module:qualname"), if this process
    has it; a record is never a reason to import anything."""
    if not name:
        return None
    module, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, GradexplainError) else None


__all__ = ["DEFAULT_TIMEOUT", "MAX_RANKS", "LaunchReport", "RankContext", "check_ranks",
           "launch", "run_ranks"]
