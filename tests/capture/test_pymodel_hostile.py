"""The user's own Python model misbehaving (issue 19): what it prints, exits with or raises.

Each test writes a small model file in tmp_path and runs the real command line in a subprocess
(`python -m gradexplain walk FILE.py:NAME --input 2x3`, this tree on PYTHONPATH, a timeout so
nothing can hang the suite). The rule: stdout is gradexplain's alone (JSON still parses, the
model's prints are on stderr), and anything the user's code raises or exits with (at import, in
the factory, forward, a hook, a deep copy) is one `error:` line naming the file, exit 2; Ctrl-C
stays exit 130. Gradients are compared with plain PyTorch run here, on the same source.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.cli import Result
from tests.helpers.pycli import assert_one_model_error_line as one_error_line
from tests.helpers.pycli import run_separately

FILE = "hostile_models.py"

# One file of models; each factory misbehaves in one way. Plain PyTorch: the tests exec it too.
SOURCE = '''
import atexit
import copy
import os
import signal
import subprocess
import sys
import warnings

import torch
from torch import nn

if os.environ.get("HOSTILE_AT_IMPORT") == "print":
    print("import says hello")
if os.environ.get("HOSTILE_AT_IMPORT") == "exit":
    sys.exit(7)
if os.environ.get("HOSTILE_AT_IMPORT") == "warn":
    warnings.warn("import warns \x1b[2J")


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")


class NotAString(Exception):
    def __str__(self):
        return 5


class Custom(BaseException):
    pass


def misbehave(how):
    if how == "exit":
        sys.exit(3)
    if how == "exit_text":
        sys.exit("bye")
    if how == "unprintable":
        raise Unprintable()
    if how == "not_a_string":
        raise NotAString()
    if how == "huge":
        raise ValueError("x" * 1_000_000)
    if how == "generator_exit":
        raise GeneratorExit()
    if how == "custom_base":
        raise Custom("a BaseException of its own")
    if how == "interrupt":
        raise KeyboardInterrupt()
    if how == "escape":
        raise ValueError("\x1b[2J\x1b]0;pwned\x07 cleared the screen")
    if how == "runtime_error":  # what torch raises too: still the hook's, not torch's refusal
        raise RuntimeError("this hook is unhappy")


class Net(nn.Module):
    def __init__(self, how=None, prints=0):
        super().__init__()
        self.l = nn.Linear(3, 2)
        self.how = how
        self.prints = prints

    def forward(self, x):
        misbehave(self.how)
        for number in range(self.prints):
            print("forward line", number, "\\x1b[2J")
        return torch.tanh(self.l(x))


class BadRepr(Net):
    def extra_repr(self):
        raise ValueError("extra_repr is broken")


class ExitingRepr(Net):
    def __repr__(self):
        sys.exit(9)


class NoCopy(Net):
    def __deepcopy__(self, memo):
        misbehave(os.environ["HOSTILE_HOW"])


class ReturnsNone(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 2)

    def forward(self, x):
        self.l(x)


class Logger(nn.Module):
    def forward(self, x):
        return None


class LogsInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.log = Logger()
        self.l = nn.Linear(3, 2)

    def forward(self, x):
        self.log(x)
        return self.l(x)


def how():
    return os.environ.get("HOSTILE_HOW")


def make_printing():
    print("factory says hello")
    model = Net(prints=3)
    model.l.register_forward_hook(lambda module, args, out: print("hook says hello"))
    return model


def make_chatty():
    return Net(prints=100_000)


class Warns(Net):
    def forward(self, x):
        warnings.warn("forward warns \x1b]0;pwned\x07" + "x" * 100_000 + "\\n" * 10_000)
        return super().forward(x)


def make_warning():
    warnings.warn("factory warns \x9b31m")
    return Warns()


def make_forward():
    return Net(how())


def make_factory():
    misbehave(how())
    return Net()


def make_forward_hook():
    model = Net()
    model.l.register_forward_hook(lambda module, args, out: misbehave(how()))
    return model


def make_backward_hook():
    model = Net()
    model.l.register_full_backward_hook(lambda module, grad_in, grad_out: misbehave(how()))
    return model


def make_tensor_hook():
    model = Net()
    model.l.weight.register_hook(lambda grad: misbehave(how()))
    return model


def make_no_copy():
    return NoCopy()


def make_bad_repr():
    return BadRepr()


def make_exiting_repr():
    return ExitingRepr()


def make_returns_none():
    return ReturnsNone()


def make_logs_inside():
    return LogsInside()


class Outside(Net):
    """Writes past print() and sys.stdout, as C code or a child process would (HOSTILE_HOW)."""

    def forward(self, x):
        if how() == "descriptor":
            os.write(1, b"descriptor says hello\\n")
        if how() == "dunder":
            sys.__stdout__.write("dunder says hello\\n")  # unflushed
        if how() == "child":
            subprocess.run([sys.executable, "-c", "print('child says hello')"], check=True)
        if how() == "stderr":
            sys.stderr.write("stderr says \x1b[2J\x1b]0;pwned\x07 hello\\n")
        if how() == "atexit":
            atexit.register(print, "atexit says hello")
        if how() == "timer":  # SIGALRM, no handler: its default action ends the process
            signal.setitimer(signal.ITIMER_REAL, 0.05)
        return super().forward(x)


def make_outside():
    return Outside()
'''


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / FILE
    path.write_text(SOURCE, encoding="utf-8")
    return path


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return run_separately(*args, env=env)


def walk(models: Path, factory: str, *more: str, env: dict[str, str] | None = None) -> Result:
    return run("walk", f"{models}:{factory}", "--input", "2x3", *more, env=env)


def assert_one_error_line(result: Result, *words: str) -> str:
    return one_error_line(result, FILE, *words)


def plain_torch(factory: str) -> dict[str, torch.Tensor]:
    """The oracle: SOURCE's factory under torch.manual_seed(0), on torch.manual_seed(0)'s
    randn(2, 3), `loss = output.sum(); loss.backward()`; the gradients by leaf name."""
    namespace: dict[str, Any] = {}
    # The models' warnings are the subprocess's to show; here they would fill pytest's summary
    # with their escape sequences.
    with contextlib.redirect_stdout(io.StringIO()), torch.random.fork_rng(devices=[]), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(SOURCE, FILE, "exec"), namespace)
        torch.manual_seed(0)
        model = namespace[factory]()
        torch.manual_seed(0)
        x = torch.randn(2, 3).requires_grad_()
        model(x).sum().backward()
    grads = {"x": x.grad}
    grads.update({name: param.grad for name, param in model.named_parameters()})
    return {name: grad for name, grad in grads.items() if grad is not None}


def assert_grads_match(doc: dict[str, Any], factory: str) -> None:
    expected = plain_torch(factory)
    for walk_pass in doc["passes"]:
        got = walk_pass["grads"]
        assert set(got) == set(expected), (walk_pass["mode"], sorted(got))
        for name, grad in expected.items():
            torch.testing.assert_close(torch.tensor(got[name], dtype=grad.dtype), grad)


# --- 1. what the model prints -------------------------------------------------------------------


def test_prints_go_to_stderr_and_the_json_still_parses(models: Path) -> None:
    result = walk(models, "make_printing", "--format", "json",
                  env={"HOSTILE_AT_IMPORT": "print"})
    assert result.code == 0, result.stderr[-2000:]
    doc = json.loads(result.stdout)  # stdout is ours alone
    assert_grads_match(doc, "make_printing")
    for said in ("import says hello", "factory says hello", "hook says hello",
                 "forward line 2"):
        assert said in result.stderr and said not in result.stdout, said
    printed = [line for line in result.stderr.splitlines() if "says hello" in line]
    assert printed and all(line.startswith("model output: ") for line in printed)


def test_a_report_on_stdout_holds_no_print(models: Path) -> None:
    result = run("report", f"{models}:make_printing", "--input", "2x3")
    assert result.code == 0, result.stderr[-2000:]
    assert result.stdout.startswith("#")
    assert "says hello" not in result.stdout and "forward line" not in result.stdout
    assert "factory says hello" in result.stderr


def test_printed_output_is_bounded_and_escaped(models: Path) -> None:
    result = walk(models, "make_chatty", "--format", "json")
    assert result.code == 0, result.stderr[-2000:]
    json.loads(result.stdout)
    lines = result.stderr.splitlines()
    # 100,000 lines a forward: a screenful shown, the rest counted, no terminal escape acted on
    assert 1 < len(lines) <= 60, len(lines)
    assert "more line" in lines[-1]
    assert "\x1b" not in result.stderr and "\\x1b" in result.stderr


@pytest.mark.parametrize("how", ["descriptor", "dunder", "child", "stderr"])
def test_output_past_print_goes_to_stderr_escaped(models: Path, how: str) -> None:
    """File descriptor 1 itself (os.write, sys.__stdout__, a child process) and sys.stderr:
    stdout still parses, and the text is a `model output:` line with no escape acted on."""
    result = walk(models, "make_outside", "--format", "json", env={"HOSTILE_HOW": how})
    assert result.code == 0, result.stderr[-2000:]
    json.loads(result.stdout)
    said = [line for line in result.stderr.splitlines() if f"{how} says" in line]
    assert said and all(line.startswith("model output: ") for line in said), result.stderr
    assert "\x1b" not in result.stderr and "\a" not in result.stderr
    if how == "stderr":
        assert "\\x1b[2J\\x1b]0;pwned\\x07 hello" in said[0], said


def test_a_report_holds_no_descriptor_output(models: Path) -> None:
    result = run("report", f"{models}:make_outside", "--input", "2x3",
                 env={"HOSTILE_HOW": "descriptor"})
    assert result.code == 0, result.stderr[-2000:]
    assert result.stdout.startswith("#") and "says hello" not in result.stdout
    assert "model output: descriptor says hello" in result.stderr


def test_nothing_the_model_left_to_run_at_exit_follows_the_json(models: Path) -> None:
    result = walk(models, "make_outside", "--format", "json", env={"HOSTILE_HOW": "atexit"})
    assert result.code == 0, result.stderr[-2000:]
    json.loads(result.stdout)
    assert "atexit says hello" not in result.stdout


def test_a_timer_the_forward_starts_does_not_end_the_walk(models: Path) -> None:
    result = walk(models, "make_outside", "--format", "json", env={"HOSTILE_HOW": "timer"})
    assert result.code == 0, (result.code, result.stderr[-2000:])
    assert_grads_match(json.loads(result.stdout), "make_outside")


def test_warnings_are_escaped_and_bounded(models: Path) -> None:
    # Python shows a warning itself, on stderr: the model's escape sequences must not act.
    result = walk(models, "make_warning", "--format", "json", env={"HOSTILE_AT_IMPORT": "warn"})
    assert result.code == 0, result.stderr[-2000:]
    assert_grads_match(json.loads(result.stdout), "make_warning")
    for said in ("import warns", "factory warns", "forward warns"):
        assert said in result.stderr, said
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", result.stderr)
    assert "\\x1b" in result.stderr and "\\u009b" in result.stderr
    assert max(len(line) for line in result.stderr.splitlines()) < 400
    assert len(result.stderr.splitlines()) < 40


def test_the_api_leaves_prints_to_the_caller(capsys: pytest.CaptureFixture[str]) -> None:
    """explain() in a notebook: the user's prints are theirs to see, on their stdout."""
    from gradexplain.api import explain

    namespace: dict[str, Any] = {}
    exec(compile(SOURCE, FILE, "exec"), namespace)
    explanation = explain(namespace["make_printing"], (2, 3))
    assert not explanation.failures()
    assert "forward line 0" in capsys.readouterr().out


# --- 2. exits, anywhere -------------------------------------------------------------------------


@dataclass(frozen=True)
class Exit:
    id: str
    factory: str
    env: dict[str, str]
    words: tuple[str, ...]


EXITS = [
    Exit("at_import", "make_forward", {"HOSTILE_AT_IMPORT": "exit"},
         ("running it", "SystemExit(7)")),
    Exit("in_factory", "make_factory", {"HOSTILE_HOW": "exit"}, ("calling it", "SystemExit(3)")),
    Exit("in_forward", "make_forward", {"HOSTILE_HOW": "exit"}, ("forward", "SystemExit(3)")),
    Exit("with_text", "make_forward", {"HOSTILE_HOW": "exit_text"}, ("SystemExit('bye')",)),
    Exit("in_forward_hook", "make_forward_hook", {"HOSTILE_HOW": "exit"}, ("SystemExit(3)",)),
    Exit("in_backward_hook", "make_backward_hook", {"HOSTILE_HOW": "exit"},
         ("SystemExit(3)", "full pass")),
    Exit("in_tensor_hook", "make_tensor_hook", {"HOSTILE_HOW": "exit"},
         ("SystemExit(3)", "legacy pass")),
    Exit("in_deepcopy", "make_no_copy", {"HOSTILE_HOW": "exit"}, ("SystemExit(3)",)),
]


@pytest.mark.parametrize("case", EXITS, ids=[case.id for case in EXITS])
def test_an_exit_in_user_code_is_one_error_line(models: Path, case: Exit) -> None:
    line = assert_one_error_line(walk(models, case.factory, env=case.env), *case.words)
    # where in the user's file: the line of sys.exit (or of the import-time exit)
    assert re.search(rf"{re.escape(FILE)}:\d+\)$", line), line


def test_ctrl_c_in_the_forward_is_still_130(models: Path) -> None:
    result = walk(models, "make_forward", env={"HOSTILE_HOW": "interrupt"})
    assert result.code == 130
    assert "Traceback" not in result.stderr and result.stdout == ""


# --- 3. repr, and a forward that returns nothing ------------------------------------------------


@pytest.mark.parametrize("factory", ["make_bad_repr", "make_exiting_repr"])
def test_a_failing_repr_does_not_stop_the_walk(models: Path, factory: str) -> None:
    result = walk(models, factory, "--format", "json")
    assert result.code == 0, result.stderr[-2000:]
    assert_grads_match(json.loads(result.stdout), factory)
    report = run("report", f"{models}:{factory}", "--input", "2x3")
    assert report.code == 0, report.stderr[-2000:]
    class_name = "BadRepr" if factory == "make_bad_repr" else "ExitingRepr"
    assert f"{class_name}(" in report.stdout


def test_a_forward_returning_none_is_said_plainly(models: Path) -> None:
    line = assert_one_error_line(walk(models, "make_returns_none"), "returned None",
                                 "backpropagate")
    assert "TypeError" not in line


def test_a_module_returning_none_is_named(models: Path) -> None:
    line = assert_one_error_line(walk(models, "make_logs_inside"), "returned None")
    assert "forward of log" in line and "TypeError" not in line


# --- 4. any exception, any message --------------------------------------------------------------

RAISES = [("make_forward", "unprintable", "Unprintable"),
          ("make_forward", "not_a_string", "NotAString"),
          ("make_forward", "huge", "ValueError"),
          ("make_forward", "escape", "ValueError"),
          ("make_forward", "generator_exit", "GeneratorExit"),
          ("make_forward", "custom_base", "Custom"),
          ("make_factory", "unprintable", "Unprintable"),
          ("make_factory", "generator_exit", "GeneratorExit"),
          ("make_backward_hook", "huge", "ValueError"),
          ("make_backward_hook", "custom_base", "Custom"),
          ("make_backward_hook", "runtime_error", "RuntimeError"),
          ("make_tensor_hook", "runtime_error", "RuntimeError")]


@pytest.mark.parametrize(("place", "how", "name"), RAISES,
                         ids=[f"{how}-{place}" for place, how, _ in RAISES])
def test_any_exception_is_one_bounded_line(models: Path, place: str, how: str,
                                           name: str) -> None:
    line = assert_one_error_line(walk(models, place, env={"HOSTILE_HOW": how}), name)
    assert len(line) < 600, len(line)
    assert line.isprintable(), line  # no terminal control sequence from the message


def test_the_api_raises_its_own_error_for_an_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """explain(): the model's sys.exit() does not end the caller's notebook or script."""
    from gradexplain.api import explain
    from gradexplain.errors import GradexplainError

    monkeypatch.setenv("HOSTILE_HOW", "exit")
    namespace: dict[str, Any] = {}
    exec(compile(SOURCE, FILE, "exec"), namespace)
    with pytest.raises(GradexplainError) as raised:
        explain(namespace["make_forward"], (2, 3))
    assert isinstance(raised.value.__cause__, SystemExit)


FREES_STORAGE = """
import torch
from torch import nn


class Twice(nn.Module):
    def forward(self, x):
        return x * 2


class Frees(nn.Module):
    # Its submodule's output freed (storage resized to nothing) once used, as FSDP2 frees the
    # parameters it gathered for the forward.
    def __init__(self):
        super().__init__()
        self.twice = Twice()
        self.scale = nn.Parameter(torch.tensor(3.0))

    def forward(self, x):
        y = self.twice(x)
        z = y.sum() * self.scale
        y.untyped_storage().resize_(0)
        return z


def make():
    return Frees()
"""


def test_a_tensor_whose_storage_the_model_freed_is_not_read(tmp_path: Path) -> None:
    """The walk records each named tensor's forward value at the end of a pass: reading one
    whose storage the model resized to nothing read freed memory (the process died of SIGSEGV).
    Its own process, as a user runs it; the gradient of `scale` checked against plain torch."""
    from tests.helpers.pycli import run_separately

    model = tmp_path / "frees.py"
    model.write_text(FREES_STORAGE)
    result = run_separately("walk", f"{model}:make", "--input", "3", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    from gradexplain.capture.pymodel import parse_input, random_inputs

    (x,) = random_inputs([parse_input("3")])
    expected = float((x * 2).sum())
    for walk_pass in document["passes"]:
        assert abs(walk_pass["grads"]["scale"] - expected) <= 1e-5 * max(1.0, abs(expected))


FREES_PARAMETER = """
import torch
from torch import nn


class FreesItsBias(nn.Module):
    # Its parameter's storage freed once used (resized to nothing), as FSDP2 frees what it
    # gathered: the builds share one copy of the parameters, which is that storage.
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        z = (x * 2).sum() + self.bias
        self.bias.untyped_storage().resize_(0)
        return z


def make():
    return FreesItsBias()
"""


def test_a_parameter_whose_storage_the_model_freed_is_copied_afresh(tmp_path: Path) -> None:
    """The builds of a Python model share one copy of its parameters while no pass changes
    it (capture/pool.py); a pass that frees a parameter's storage frees that copy: the next
    build copies the model's values afresh instead of comparing freed memory (which killed the
    process). Its own process, as a user runs it; the gradients checked against plain torch."""
    from tests.helpers.pycli import run_separately

    model = tmp_path / "frees_bias.py"
    model.write_text(FREES_PARAMETER)
    result = run_separately("walk", f"{model}:make", "--input", "3", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert [walk_pass["mode"] for walk_pass in document["passes"]] == ["legacy", "full"]
    for walk_pass in document["passes"]:
        assert abs(walk_pass["grads"]["bias"] - 1.0) <= 1e-6
        assert walk_pass["grads"]["x"] == [2.0, 2.0, 2.0]


CHANGES_FOLDER = '''
import os

import torch
from torch import nn

ELSEWHERE = os.environ["ELSEWHERE"]


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 2)

    def forward(self, x):
        os.chdir(ELSEWHERE)  # as code that reads data next to its own file may do
        return self.l(x)
'''


@pytest.mark.parametrize("command", ["report -o", "walk --save"])
def test_a_forward_changing_folder_does_not_move_the_output(tmp_path: Path,
                                                            command: str) -> None:
    """A relative `-o`/`--save` is the file in the folder it was given in, though the model
    changed the working directory before the output was written (before, the report replaced
    the model's own source there)."""
    models, elsewhere = tmp_path / "models", tmp_path / "elsewhere"
    models.mkdir()
    elsewhere.mkdir()
    (models / "model.py").write_text(CHANGES_FOLDER, encoding="utf-8")
    decoy = elsewhere / "out.txt"  # what a relative write after the chdir would replace
    decoy.write_text("the user's own file\n", encoding="utf-8")
    name, flag = command.split()
    result = run_separately(name, "models/model.py:M", "--input", "4x3", flag, "out.txt",
                            env={"ELSEWHERE": str(elsewhere)}, cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert decoy.read_text(encoding="utf-8") == "the user's own file\n"
    assert (models / "model.py").read_text(encoding="utf-8") == CHANGES_FOLDER
    written = (tmp_path / "out.txt").read_text(encoding="utf-8")
    if name == "walk":
        assert json.loads(written)["session"]  # the saved session
    else:
        assert "M from models/model.py:M" in written


RETURNS_TEXT = '''
import torch
from torch import nn


class Text(nn.Module):
    def forward(self, x):
        return "s"


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 2)
        self.c = Text()

    def forward(self, x):
        self.c(x)  # its result unused: only the legacy hook's search for a tensor meets it
        return self.l(x)
'''


@pytest.mark.parametrize(("factory", "whose"), [("Text", "its forward"),
                                                ("Outer", "the forward of c")])
def test_a_module_returning_text_is_named_not_a_hang(tmp_path: Path, factory: str,
                                                     whose: str) -> None:
    """torch's legacy hooks look for a tensor in a module's result by taking item [0] until
    one comes, which on a str never ends (before, the walk spun until killed)."""
    path = tmp_path / "text_model.py"
    path.write_text(RETURNS_TEXT, encoding="utf-8")
    namespace: dict[str, Any] = {}
    exec(compile(RETURNS_TEXT, str(path), "exec"), namespace)  # plain torch runs it
    assert namespace[factory]()(torch.randn(4, 3)) is not None
    result = run_separately("walk", f"{path}:{factory}", "--input", "4x3")
    assert result.code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert f"{whose} returned a str" in lines[0]


PRINTING_THREAD = '''
import sys
import threading
import time

import torch
from torch import nn


def chatter():
    for number in range(2000):  # about ten seconds: past the walk and its output
        print("model thread line", number)
        sys.stdout.flush()
        sys.stderr.write("\\x1b[2J thread's stderr\\n")
        time.sleep(0.005)


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 2)

    def forward(self, x):
        threading.Thread(target=chatter, daemon=True).start()
        return self.l(x)
'''


def test_a_thread_the_model_left_printing_stays_out_of_the_json(tmp_path: Path) -> None:
    """A logger thread the forward started keeps printing after the model's code is done:
    stdout is still the JSON alone (before, its lines came first and the JSON did not parse),
    and its stderr never reaches the terminal raw."""
    path = tmp_path / "chatty.py"
    path.write_text(PRINTING_THREAD, encoding="utf-8")
    result = run_separately("walk", f"{path}:M", "--input", "4x3", "--format", "json")
    assert result.code == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["passes"]
    assert "\x1b" not in result.stderr


@pytest.mark.parametrize("replaced", ["nn.Module.register_full_backward_hook",
                                      "nn.Module.register_forward_hook",
                                      "torch.Tensor.register_hook"])
def test_a_model_that_replaces_torchs_hook_registration_is_one_error(
        replaced: str, tmp_path: Path) -> None:
    """A model file that monkeypatches one of torch's hook registration functions to return
    None: one line saying so (exit 2), where gradexplain's own registration failed as an
    internal error."""
    model = tmp_path / "patches.py"
    model.write_text(f"import torch\nfrom torch import nn\n{replaced} = lambda *a, **k: None\n"
                     "def make():\n    return nn.Sequential(nn.Linear(3, 2), nn.Tanh())\n")
    result = run_separately("walk", f"{model}:make", "--input", "4x3")
    message = one_error_line(result, "patches.py")
    assert "replaced one of torch's hook registration functions" in message


def test_a_process_the_models_code_forks_off_writes_no_second_output(tmp_path: Path) -> None:
    """A model file that calls os.fork() at import: the copy runs on through gradexplain's code
    too, and wrote a second JSON document after the first. Only the command's own process
    writes; the gradient is plain torch's."""
    model = tmp_path / "forks.py"
    model.write_text("import os\nimport torch\nfrom torch import nn\nos.fork()\n\n"
                     "def make():\n    torch.manual_seed(0)\n    return nn.Linear(3, 1)\n")
    result = run_separately("walk", f"{model}:make", "--input", "4x3", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)  # one document: "Extra data" before
    from gradexplain.capture.pymodel import parse_input, random_inputs

    (x,) = random_inputs([parse_input("4x3")])
    expected = x.sum(0)  # ∂ sum(x Wᵀ + b) / ∂W, one row
    for walk_pass in document["passes"]:
        got = torch.tensor(walk_pass["grads"]["weight"], dtype=torch.float64)
        assert torch.allclose(got, expected.double().unsqueeze(0), atol=1e-5)
