"""One forked rank's life, from the fork to its `os._exit`, and the one record it sends the
parent on its pipe: its result, or what it raised (launch.py is the parent's side).

A rank never returns into the parent's code (pytest, the command line, atexit handlers): it
ends with `os._exit`, whatever happens. Its stdout goes to /dev/null (it would corrupt the
parent's `--format json`), its stderr to a private temporary file the parent quotes, it ignores
SIGINT (Ctrl-C reaches the whole process group; the parent stops the ranks itself), and on
Linux it dies with its parent. It joins the group through the parent's store, gloo on the
loopback interface, with one thread unless told otherwise (torch's OpenMP threads do not
survive a fork: launch.py says more).

The record is sent before the group is torn down: FSDP's teardown once aborted after both ranks
had written theirs. Before a rank leaves it waits, through the store, for every rank's work to
end: one that left while a slower one was still joining made that one fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from gradexplain.errors import GradexplainError, first_line, first_line_of
from gradexplain.user_output import own_output

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

# A record: its kind and its payload's length in bytes, then the payload.
_HEADER = struct.Struct("!cQ")
RESULT, RAISED = b"R", b"E"
# A rank's exit codes: it sent what it raised; it sent its result but its teardown raised; it
# failed before it could send anything.
FAILED, TEARDOWN_FAILED, BROKEN = 1, 3, 70
# The store's keys for the ranks' last rendezvous: how many have finished; set once all have.
_FINISHED, _ALL_FINISHED = "gradexplain/finished", "gradexplain/all finished"
_PR_SET_PDEATHSIG = 1  # prctl's option (<linux/prctl.h>): a signal for when the parent dies


@dataclass(frozen=True)
class RankContext:
    """What a rank's work is told: which rank it is, of how many."""

    rank: int
    world_size: int


@dataclass(frozen=True)
class RankPlan:
    """What every rank is started with, beside its number: the group's size, the port of the
    parent's store, the timeout of every wait, its threads, the parent's pid, and the loopback
    interface's name for gloo (None: none was found)."""

    world_size: int
    port: int
    timeout: float
    threads: int
    parent: int
    loopback: str | None


@dataclass(frozen=True)
class Raised:
    """What a rank raised, as the parent needs it: the class's name, its one line, the exit
    code it stands for, when (CLOCK_MONOTONIC is the machine's, so the parent can tell which
    rank failed first) and, for one of gradexplain's errors, its "module:qualname"."""

    kind: str
    message: str
    exit_code: int
    at: float
    error_class: str | None

    @classmethod
    def of(cls, error: BaseException) -> Raised:
        if isinstance(error, GradexplainError):
            return cls(type(error).__name__, first_line_of(error.one_line()), error.exit_code,
                       time.monotonic(), f"{type(error).__module__}:{type(error).__qualname__}")
        return cls(type(error).__name__, first_line(error), 1, time.monotonic(), None)

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def decode(cls, payload: bytes) -> Raised:
        return cls(**json.loads(payload))


def record_kind(received: bytes | bytearray) -> bytes | None:
    """RESULT or RAISED, once `received` holds the whole record; None before."""
    if len(received) < _HEADER.size:
        return None
    kind, length = _HEADER.unpack_from(received)
    return bytes(kind) if len(received) >= _HEADER.size + length else None


def record_payload(received: bytes | bytearray) -> bytes:
    """The payload of the whole record `received` holds."""
    _, length = _HEADER.unpack_from(received)
    return bytes(received[_HEADER.size:_HEADER.size + length])


def run_rank(context: RankContext, plan: RankPlan, work: Callable[[RankContext], bytes],
             mask: Iterable[int], pipe: int, stderr: int) -> None:
    """A forked rank, up to its os._exit (or its caller's, should this raise): join the group,
    run `work`, send its result or what it raised, meet the other ranks, tear the group down.
    `mask`: the signal mask to restore once SIGINT is ignored."""
    own_output()  # gradexplain's own fork: its warnings go to its stderr file
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    _end_with(plan.parent)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    os.dup2(stderr, 2)
    # New objects on the new descriptors: what the parent's had buffered is never flushed here.
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
    try:
        store = _join(context, plan)
        result = work(context)
        if not isinstance(result, bytes):
            raise TypeError(f"a rank's work returns bytes, not {type(result).__name__}")
        _send(pipe, RESULT, result)
    except BaseException as error:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
        with contextlib.suppress(BaseException):
            _send(pipe, RAISED, Raised.of(error).encode())
        os._exit(FAILED)
    import torch.distributed as dist

    try:
        # Through the store, which needs no gloo traffic.
        if store.add(_FINISHED, 1) == context.world_size:
            store.set(_ALL_FINISHED, "")
        store.wait([_ALL_FINISHED])
        if dist.is_initialized():
            dist.destroy_process_group()
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
        os._exit(TEARDOWN_FAILED)
    os._exit(0)


def _end_with(parent: int) -> None:
    """On Linux, the rank is killed when its parent dies: a parent killed by SIGKILL cannot
    stop its ranks, and one blocked in a collective or looping in a model would run on."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before that took effect
        os._exit(BROKEN)


def _join(context: RankContext, plan: RankPlan) -> Store:
    """Join the group as rank `context.rank` through the parent's store; return its client
    (for the ranks' last rendezvous)."""
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import TCPStore

    torch.set_num_threads(plan.threads)  # for the rank's whole life: nothing to put back
    if plan.loopback and "GLOO_SOCKET_IFNAME" not in os.environ:
        os.environ["GLOO_SOCKET_IFNAME"] = plan.loopback
    wait = timedelta(seconds=plan.timeout)
    store = TCPStore("127.0.0.1", plan.port, plan.world_size, is_master=False, timeout=wait)
    dist.init_process_group("gloo", store=store, rank=context.rank,
                            world_size=plan.world_size, timeout=wait)
    return store


def _send(pipe: int, kind: bytes, payload: bytes) -> None:
    data = memoryview(_HEADER.pack(kind, len(payload)) + payload)
    while data:
        data = data[os.write(pipe, data):]


__all__ = ["BROKEN", "RAISED", "RESULT", "Raised", "RankContext", "RankPlan", "record_kind",
           "record_payload", "run_rank"]
