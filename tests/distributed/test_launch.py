"""The N-rank launcher (gradexplain/distributed/launch.py): ranks forked into one gloo group
whose results come back rank by rank, and every way a run can go wrong ending in one error that
names the rank, with no rank, pipe or port left behind and nothing written on our stdout.

Every launch passes a short `timeout`, so that a launcher that hangs fails its test instead of
stalling the suite. A rank's work is a closure: the ranks are forked, so it needs no pickling,
and what the test process patches before a launch (torch's teardown) the ranks see too.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore

from gradexplain.distributed import launch as launcher
from gradexplain.distributed.launch import (
    MAX_RANKS,
    RankContext,
    launch,
    run_ranks,
)
from gradexplain.distributed.rank import RAISED, Raised
from gradexplain.errors import BadInput, RankFailed, RanksTimedOut, UsageError
from tests.helpers.cli import REPO

GUARD = 30.0  # seconds: the timeout of every launch that should end well before it


class PeerError(BadInput):
    """One of gradexplain's errors, as a rank's own code would raise it."""


def _all_reduced(values: list[float]) -> Callable[[RankContext], bytes]:
    """Work that all-reduces `values` scaled by (rank + 1), and returns what it got as JSON."""

    def work(context: RankContext) -> bytes:
        tensor = torch.tensor(values) * (context.rank + 1)
        dist.all_reduce(tensor)
        return json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(),
                           "context": [context.rank, context.world_size],
                           "sum": tensor.tolist()}).encode()

    return work


def _failing_on(rank: int, fail: Callable[[], object]) -> Callable[[RankContext], bytes]:
    """Work in which `rank` calls `fail` while every other rank waits in an all-reduce that
    cannot complete without it."""

    def work(context: RankContext) -> bytes:
        if context.rank == rank:
            fail()
        dist.all_reduce(torch.ones(2))
        return b"done"

    return work


@pytest.fixture
def ports(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The ports of the rendezvous stores the launches of a test served."""
    served: list[int] = []
    make = launcher._master_store

    def recorded() -> TCPStore:
        store = make()
        served.append(store.port)
        return store

    monkeypatch.setattr(launcher, "_master_store", recorded)
    yield served


def _assert_free(port: int) -> None:
    """Nothing listens on `port`: this process can listen on it (SO_REUSEADDR, as any server
    sets: the store's closed connections may wait in TIME_WAIT, which holds no port)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
        probe.listen()


def _assert_reaped(pids: list[int]) -> None:
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_each_rank_returns_its_all_reduce(world_size: int) -> None:
    values = [0.5, -2.0, 3.25]
    results = run_ranks(world_size, _all_reduced(values), timeout=GUARD)
    expected = torch.stack([torch.tensor(values) * (rank + 1) for rank in range(world_size)])
    assert len(results) == world_size
    for rank, result in enumerate(results):
        found = json.loads(result)
        assert found["rank"] == rank
        assert found["world"] == world_size
        assert found["context"] == [rank, world_size]
        torch.testing.assert_close(torch.tensor(found["sum"]), expected.sum(0))


def test_a_result_larger_than_a_pipe_comes_back_whole() -> None:
    # A pipe holds 64 KiB: a parent that only read after a rank exited would wait forever.
    def work(context: RankContext) -> bytes:
        return bytes([context.rank + 1]) * (8 * 2**20) + b"end"

    results = run_ranks(2, work, timeout=GUARD)
    assert [len(result) for result in results] == [8 * 2**20 + 3] * 2
    assert [result[:1] + result[-3:] for result in results] == [b"\x01end", b"\x02end"]
    assert results[1].count(b"\x02") == 8 * 2**20


@pytest.mark.parametrize("failing", [0, 1])
def test_a_rank_that_raises_is_named_and_the_others_stop(failing: int, ports: list[int]) -> None:
    def fail() -> None:
        raise ValueError("the model broke\nsecond line")

    with pytest.raises(RankFailed) as caught:
        run_ranks(2, _failing_on(failing, fail), timeout=GUARD)
    error = caught.value
    assert (error.rank, error.kind, error.exit_code) == (failing, "ValueError", 1)
    assert error.error_class is None
    assert str(error) == f"rank {failing} failed: ValueError: the model broke"
    assert "second line" in error.stderr_tail  # its traceback went to its stderr file
    _assert_free(ports[0])


@pytest.mark.parametrize(("raised", "exit_code"), [(UsageError("--wrap: no such wrap"), 2),
                                                   (PeerError("the forward refused"), 2),
                                                   (RanksTimedOut((3,), 1.0), 1)])
def test_a_gradexplain_error_keeps_its_class_and_exit_code(raised: Exception,
                                                           exit_code: int) -> None:
    def fail() -> None:
        raise raised

    with pytest.raises(RankFailed) as caught:
        run_ranks(2, _failing_on(1, fail), timeout=GUARD)
    error = caught.value
    assert error.error_class is type(raised)
    assert error.exit_code == exit_code
    assert error.kind == type(raised).__name__
    assert str(error) == f"rank 1 failed: {raised}"


@pytest.mark.parametrize("end", [SystemExit(0), KeyboardInterrupt(), GeneratorExit()])
def test_a_rank_never_returns_into_the_parent(end: BaseException) -> None:
    # A rank that returned into pytest would go on running the suite, twice over.
    def fail() -> None:
        raise end

    with pytest.raises(RankFailed) as caught:
        run_ranks(2, _failing_on(0, fail), timeout=GUARD)
    assert (caught.value.rank, caught.value.kind) == (0, type(end).__name__)


def test_a_rank_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    def work(context: RankContext) -> bytes:
        if context.rank == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            (tmp_path / "0.pid").write_text(str(os.getpid()))
            time.sleep(60)
        while not (tmp_path / "0.pid").exists():
            time.sleep(0.01)
        raise ValueError("the model broke")

    with pytest.raises(RankFailed) as caught:
        run_ranks(2, work, timeout=GUARD)
    assert (caught.value.rank, caught.value.kind) == (1, "ValueError")
    _assert_reaped([int((tmp_path / "0.pid").read_text())])


def test_a_rank_killed_by_a_signal_is_named_with_the_signal(ports: list[int]) -> None:
    def die() -> None:
        sys.stderr.write("about to go\nits last words\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(RankFailed) as caught:
        run_ranks(2, _failing_on(1, die), timeout=GUARD)
    error = caught.value
    assert (error.rank, error.kind, error.exit_code) == (1, "SIGKILL", 1)
    assert str(error) == ("rank 1 failed: it was killed by SIGKILL before it sent its result; "
                          "its stderr ended 'its last words'")
    _assert_free(ports[0])


def test_a_rank_that_exits_without_a_result_is_named_with_its_code() -> None:
    with pytest.raises(RankFailed) as caught:
        run_ranks(2, _failing_on(0, lambda: os._exit(3)), timeout=GUARD)
    assert (caught.value.rank, caught.value.kind) == (0, "exit")
    assert str(caught.value) == "rank 0 failed: it exited with code 3 before it sent its result"


def test_a_result_that_is_not_bytes_fails_its_rank() -> None:
    def work(context: RankContext) -> bytes:
        return "text" if context.rank == 1 else b"bytes"  # type: ignore[return-value]

    with pytest.raises(RankFailed) as caught:
        run_ranks(2, work, timeout=GUARD)
    assert (caught.value.rank, caught.value.kind) == (1, "TypeError")


def test_no_rank_leaves_before_every_rank_has_finished(tmp_path: Path) -> None:
    # A rank that left early made a slower one fail as it joined ("Connection closed by peer").
    def work(context: RankContext) -> bytes:
        (tmp_path / f"{context.rank}.pid").write_text(str(os.getpid()))
        if context.rank == 0:
            return b"quick"
        time.sleep(0.5)
        return b"alive" if _alive(int((tmp_path / "0.pid").read_text())) else b"gone"

    assert run_ranks(2, work, timeout=GUARD) == (b"quick", b"alive")


def test_the_timeout_stops_the_ranks_without_a_result(ports: list[int], tmp_path: Path) -> None:
    def work(context: RankContext) -> bytes:
        (tmp_path / f"{context.rank}.pid").write_text(str(os.getpid()))
        if context.rank == 0:
            time.sleep(60)
        return b"quick"

    with pytest.raises(RanksTimedOut) as caught:
        run_ranks(2, work, timeout=1.5)
    assert caught.value.ranks == (0,)
    assert caught.value.exit_code == 1
    assert str(caught.value) == "rank 0 had not finished after the 1.5 s timeout and was stopped"
    _assert_reaped([int((tmp_path / f"{rank}.pid").read_text()) for rank in range(2)])
    _assert_free(ports[0])


@pytest.fixture
def sigchld_ignored() -> Iterator[None]:
    """The test process ignores SIGCHLD: the system reaps its children, and their wait
    statuses are gone."""
    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGCHLD, before)


@pytest.mark.parametrize("where", ["no pidfds", "SIGCHLD ignored"])
def test_the_ranks_are_followed_without_pidfds_or_wait_statuses(
        where: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if where == "no pidfds":  # the ranks' exits are polled
        monkeypatch.setattr(launcher, "_exit_fd", lambda pid: None)
    else:
        request.getfixturevalue("sigchld_ignored")
    report = launch(2, _all_reduced([1.0]), timeout=GUARD)
    assert [json.loads(result)["sum"] for result in report.results] == [[3.0], [3.0]]
    assert report.notes == ()
    with pytest.raises(RankFailed) as caught:
        run_ranks(2, _failing_on(1, lambda: os._exit(3)), timeout=GUARD)
    ended = "exited with code 3" if where == "no pidfds" else "ended"
    assert str(caught.value) == f"rank 1 failed: it {ended} before it sent its result"


def test_no_port_stays_bound_after_a_run(ports: list[int]) -> None:
    run_ranks(2, _all_reduced([1.0]), timeout=GUARD)
    _assert_free(ports[0])


def test_ranks_write_nothing_on_our_stdout_or_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    def work(context: RankContext) -> bytes:
        print("printed by a rank")
        print("warned by a rank", file=sys.stderr)
        os.write(1, b"written on fd 1\n")
        os.write(2, b"written on fd 2\n")
        sys.__stdout__.write("through sys.__stdout__\n")  # type: ignore[union-attr]
        return b"ok"

    print("the parent's own line")
    assert run_ranks(2, work, timeout=GUARD) == (b"ok", b"ok")
    captured = capfd.readouterr()
    assert captured.out == "the parent's own line\n"
    assert captured.err == ""


def test_ranks_ignore_sigint() -> None:
    # Ctrl-C reaches the whole process group; the parent alone decides what happens.
    def work(context: RankContext) -> bytes:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        dist.barrier()
        return b"still here"

    assert run_ranks(2, work, timeout=GUARD) == (b"still here", b"still here")


def test_ctrl_c_in_the_parent_stops_and_reaps_the_ranks(tmp_path: Path,
                                                        ports: list[int]) -> None:
    def work(context: RankContext) -> bytes:
        (tmp_path / f"{context.rank}.pid").write_text(str(os.getpid()))
        time.sleep(60)
        return b"never"

    def interrupt() -> None:
        end = time.monotonic() + GUARD
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < end:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    pressing = threading.Thread(target=interrupt)
    pressing.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_ranks(2, work, timeout=GUARD)
    finally:
        pressing.join()
    _assert_reaped([int((tmp_path / f"{rank}.pid").read_text()) for rank in range(2)])
    _assert_free(ports[0])


@pytest.mark.parametrize("world_size", [0, -1, MAX_RANKS + 1, 10**5000, True, 2.0, "2", None],
                         ids=["0", "-1", "max+1", "huge", "True", "2.0", "'2'", "None"])
def test_a_bad_world_size_is_a_usage_error_before_anything_starts(
        world_size: object, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("nothing should start")

    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(launcher, "_master_store", refuse)
    with pytest.raises(UsageError) as caught:
        run_ranks(world_size, _all_reduced([1.0]))  # type: ignore[arg-type]
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith("world_size ")
    assert f"from 1 to {MAX_RANKS}" in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize("timeout", [0, -1.0, math.inf, math.nan, 86_401, 10**400, "5", True],
                         ids=["0", "-1.0", "inf", "nan", "over a day", "huge", "'5'", "True"])
def test_a_bad_timeout_is_a_usage_error(timeout: object,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "_master_store", lambda: pytest.fail("nothing should start"))
    with pytest.raises(UsageError) as caught:
        run_ranks(2, _all_reduced([1.0]), timeout=timeout)  # type: ignore[arg-type]
    assert str(caught.value).startswith("timeout ")
    assert len(str(caught.value).splitlines()) == 1


def test_ranks_compute_with_one_thread_after_a_parent_that_used_more() -> None:
    # The parent's OpenMP threads do not survive the fork: a rank that asked for them would
    # hang in its first parallel op. With one thread it never asks.
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        weights = torch.linspace(-1, 1, 256 * 256).reshape(256, 256)
        expected = (weights @ weights).sum().item()
    finally:
        torch.set_num_threads(before)

    def work(context: RankContext) -> bytes:
        found = (weights @ weights).sum().item()
        return json.dumps([torch.get_num_threads(), found]).encode()

    for result in run_ranks(2, work, timeout=GUARD):
        count, found = json.loads(result)
        assert count == 1
        assert found == pytest.approx(expected, rel=1e-5)


def test_ranks_compute_with_the_threads_they_are_told() -> None:
    def work(context: RankContext) -> bytes:
        return str(torch.get_num_threads()).encode()

    assert launch(2, work, timeout=GUARD, threads=2).results == (b"2", b"2")
    with pytest.raises(UsageError):
        launch(2, work, timeout=GUARD, threads=0)


def test_a_teardown_that_fails_after_the_result_still_succeeds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # FSDP's teardown aborted once in 13 runs after both ranks had written their results.
    def abort(*args: object) -> None:
        if dist.get_rank() == 1:
            print("terminate called without an active exception", file=sys.stderr)
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(dist, "destroy_process_group", abort)
    report = launch(2, _all_reduced([2.0]), timeout=GUARD)
    assert [json.loads(result)["sum"] for result in report.results] == [[6.0], [6.0]]
    assert report.notes == ("rank 1 was killed by SIGTERM after it sent its result; its stderr "
                            "ended 'terminate called without an active exception'",)


def test_a_teardown_that_hangs_after_the_results_is_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "_TEARDOWN_GRACE", 0.5)
    monkeypatch.setattr(dist, "destroy_process_group", lambda *args: time.sleep(60))
    report = launch(2, _all_reduced([2.0]), timeout=GUARD)
    assert [json.loads(result)["sum"] for result in report.results] == [[6.0], [6.0]]
    assert report.notes == tuple(f"rank {rank} was stopped: its teardown had not ended 0.5 s "
                                 f"after every rank had sent its result" for rank in range(2))


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc")
def test_the_group_talks_on_loopback_only() -> None:
    def work(context: RankContext) -> bytes:
        dist.all_reduce(torch.ones(1))
        mine = set()
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # the listing's own descriptor is gone
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith("socket:["):
                    mine.add(target[8:-1])
        addresses = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as rows:
                for row in list(rows)[1:]:
                    fields = row.split()
                    if fields[9] in mine:
                        addresses.add(fields[1].split(":")[0])
        return json.dumps(sorted(addresses)).encode()

    for result in run_ranks(2, work, timeout=GUARD):
        # 127.0.0.1 as /proc writes it (little-endian hex), or as an IPv4-mapped IPv6 address.
        assert set(json.loads(result)) <= {"0100007F", "0000000000000000FFFF00000100007F"}
        assert json.loads(result)


def test_ctrl_c_while_a_rank_is_being_started_is_held_until_it_is_known() -> None:
    with pytest.raises(KeyboardInterrupt), launcher._interrupts_held():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # a signal's Python handler runs between bytecodes
        held_back = True
    assert held_back
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


_ORPHANED = """
import os, sys, time
from gradexplain.distributed.launch import run_ranks

def work(context):
    with open(os.path.join(sys.argv[1], f"{context.rank}.pid"), "w") as file:
        file.write(str(os.getpid()))
    time.sleep(120)
    return b""

run_ranks(2, work, timeout=120)
"""


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead and waiting for whoever adopted it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_ranks_die_with_a_parent_killed_by_sigkill(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", _ORPHANED, str(tmp_path)], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + GUARD
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < end:
            assert parent.poll() is None
            time.sleep(0.05)
        pids = [int((tmp_path / f"{rank}.pid").read_text()) for rank in range(2)]
    finally:
        parent.kill()
        parent.wait()
    end = time.monotonic() + GUARD
    while any(_alive(pid) for pid in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def _rank_process(rank: int, action: str) -> launcher._Rank:
    """A process followed as a rank: its pipe's write end is handed to it, and it runs
    `action` (Python, with the end as `fd`), then sleeps until it is stopped."""
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-c", f"import os, sys, time\nfd = {write_end}\n{action}\n"
         "time.sleep(60)"], pass_fds=(write_end,))
    os.close(write_end)
    os.set_blocking(read_end, False)
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the test, as the launcher does)
    return launcher._Rank(rank, process.pid, read_end, stderr, None)


def test_a_rank_ending_by_itself_is_named_though_its_wait_status_is_lost(
        sigchld_ignored: None) -> None:
    """With SIGCHLD ignored a rank's wait status is gone. Rank 1 ends by itself (its pipe
    closes, as at its exit) while its peer raises because it is gone; if the parent signals
    rank 1 before the system has reaped it, rank 1 is still the rank that failed, not one the
    parent stopped. Without a wait status, its pipe closing before any signal says so."""
    raised = Raised("RuntimeError", "Connection reset by peer", 1, time.monotonic(), None)
    record = RAISED + struct.pack("!Q", len(raised.encode())) + raised.encode()
    peer = _rank_process(0, f"os.write(fd, {record!r}); os.close(fd)")
    ending = _rank_process(1, "os.close(fd)")
    ranks = [peer, ending]
    deadline = time.monotonic() + GUARD
    while any(rank.pipe is not None for rank in ranks) and time.monotonic() < deadline:
        for rank in ranks:
            rank.read()
        time.sleep(0.01)
    launcher._stop(ranks)  # rank 1 is alive still: the parent's SIGTERM ends it
    assert ending.sent and ending.status is not None
    failure = launcher._failure(ranks)
    for rank in ranks:
        rank.stderr.close()
    assert failure.rank == 1
    assert str(failure) == "rank 1 failed: it ended before it sent its result"
