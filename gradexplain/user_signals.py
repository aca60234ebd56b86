"""The user's own Python and the process's signals: timers cannot kill the walk, and the
handlers are put back when the user's code is done. Part of the command line's edge, like
user_output: `explain()` leaves the caller's process to the caller.

A model's forward may start an interval timer (`signal.alarm`, `signal.setitimer`) without a
handler: SIGALRM's default action ends the process (exit 142, nothing said) while
gradexplain is still labelling, long after that forward returned. While the user's code can
run, the timer signals are ignored unless the user sets a handler of their own (then it is
theirs to run); afterwards the timers are stopped and every handler the user's code may have
changed (the timer signals, SIGINT, SIGTERM) is put back, so Ctrl-C is exit 130 again and
no timer fires while the output is written. Not guarded, because nothing in the process can
be: `os._exit()` ends the process at once, as does a signal whose action cannot be changed
(SIGKILL, SIGSTOP), or one the user's code sends with a default action of ending it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# The signals interval timers send: real time, process time, and process and system time.
# Windows has neither the timers nor their signals: there only SIGINT and SIGTERM are put back.
_TIMERS = tuple((getattr(signal, timer), getattr(signal, number)) for timer, number in (
    ("ITIMER_REAL", "SIGALRM"), ("ITIMER_VIRTUAL", "SIGVTALRM"), ("ITIMER_PROF", "SIGPROF"))
    if hasattr(signal, timer) and hasattr(signal, number))
_RESTORED = (*(number for _, number in _TIMERS), signal.SIGINT, signal.SIGTERM)


@contextmanager
def user_signals() -> Iterator[None]:
    """Within the block, the timer signals are ignored; at its end the timers are stopped and
    the handlers are as they were before it. Only the main thread can set handlers: elsewhere
    nothing is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in _RESTORED}
    for _, number in _TIMERS:
        if previous[number] is not None:  # None: set outside Python, cannot be put back
            signal.signal(number, signal.SIG_IGN)
    try:
        yield
    finally:
        for timer, _ in _TIMERS:
            signal.setitimer(timer, 0)  # stops signal.alarm's timer too (ITIMER_REAL)
        for number, handler in previous.items():
            if handler is not None:
                signal.signal(number, handler)


__all__ = ["user_signals"]
