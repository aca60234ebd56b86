"""Python models with structured outputs: what backward starts from (`--loss-of PATH`,
`explain(output=...)`), against plain torch.

The models are defined here (the command line loads this very file: `{THIS}:make_gru`). For
each, plain torch builds the same model, registers its own module backward hooks on a copy and
runs `loss = <the selected part>.sum(); loss.backward()`; gradexplain must record exactly what
those hooks received (None where torch passes None), every label must be verified, and the
final `.grad`s must be torch's.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

from gradexplain.api import Explanation, explain
from gradexplain.capture.outputs import OutputPathError
from gradexplain.capture.pymodel import input_names
from gradexplain.errors import GradexplainError
from tests.helpers.pycli import CLI, assert_one_error_line, walk_json
from tests.helpers.pyoracle import (
    args_of,
    assert_close,
    assert_module_hooks_match,
    event,
    events,
    hook_calls,
    recorded,
    torch_inputs,
)

THIS = "tests/capture/test_pymodel_outputs.py"
Select = Callable[[Any], Any]


# --- the models ---------------------------------------------------------------------------------


class Tagger(nn.Module):
    """An LSTM (or GRU) under a linear head, returning the head's output and the RNN's state as
    the RNN gives it: `(logits, (h, c))` for an LSTM, `(logits, h)` for a GRU."""

    def __init__(self, kind: str = "lstm", layers: int = 1, batch_first: bool = False) -> None:
        super().__init__()
        rnn = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = rnn(3, 4, num_layers=layers, batch_first=batch_first)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        out, state = self.rnn(x)
        return self.head(out), state


class Cell(nn.Module):
    """A hand-written Elman cell: h' = tanh(W x + U h)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(3, 4)
        self.u = nn.Linear(4, 4, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.w(x) + self.u(h))


class Unrolled(nn.Module):
    """The cell looped over the time steps of x (T, B, 3): (every step's h stacked, last h)."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = Cell()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.zeros(x.shape[1], 4)
        steps = []
        for step in x:
            h = self.cell(step, h)
            steps.append(h)
        return torch.stack(steps), h


class DictOut(nn.Module):
    """A dict of a head's logits, the hidden layer, an integer tensor and a plain string."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        hidden = torch.sigmoid(self.body(x))
        logits = self.head(hidden)
        return {"logits": logits, "hidden": hidden, "argmax": logits.argmax(-1), "note": "hi"}


class DottedKeys(nn.Module):
    """Keys with dots in them, as a model naming its outputs after its modules would write."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        hidden = torch.tanh(self.body(x))
        return {"head.logits": self.head(hidden), "nested": {"body.out": hidden}}


class NestedOut(nn.Module):
    """((a, b), c): `0.1` is b."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        a = self.a(x)
        b = self.b(torch.relu(a))
        return (a, b), b * a[:, :2]


class Pair(NamedTuple):
    score: torch.Tensor
    extra: torch.Tensor


@dataclass
class Result:
    score: torch.Tensor
    parts: Pair


class StructOut(nn.Module):
    """A tuple of a tensor and a dataclass holding a tensor and a namedtuple. (A dataclass as
    the whole output is another matter: torch's own legacy hook machinery indexes the output
    with [0] to find its first tensor, and raises on one.)"""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Result]:
        y = self.lin(x)
        return y.tanh(), Result(y * 3, Pair(y.exp(), y.sin()))


def make_lstm() -> nn.Module:
    return nn.LSTM(3, 4)


def make_gru_2_layers_batch_first() -> nn.Module:
    return nn.GRU(3, 4, num_layers=2, batch_first=True)


def make_tagger() -> nn.Module:
    return Tagger()


def make_dict_out() -> nn.Module:
    return DictOut()


def make_nested_out() -> nn.Module:
    return NestedOut()


# --- the oracle ---------------------------------------------------------------------------------


def model_of(make: Callable[[], nn.Module]) -> nn.Module:
    """What the command line loads: the factory called under torch.manual_seed(0)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make()


def leaves(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [tensor.detach().clone().requires_grad_() for tensor in tensors]


def plain_grads(model: nn.Module, inputs: list[torch.Tensor],
                loss: Callable[[Any], torch.Tensor]) -> dict[str, torch.Tensor | None]:
    """`.grad` of every input (by the forward's argument name) and parameter after a hook-free
    `loss(model(*inputs)).backward()` on copies."""
    model = copy.deepcopy(model)
    tensors = leaves(inputs)
    loss(model(*tensors)).backward()
    found: dict[str, torch.Tensor | None] = {
        name: tensor.grad for name, tensor in zip(input_names(model, len(tensors)), tensors,
                                                  strict=True)}
    found.update({name: param.grad for name, param in model.named_parameters()})
    return found


def summed(select: Select) -> Callable[[Any], torch.Tensor]:
    """loss = select(output).sum(); a selected tuple: the sum of its tensors' sums."""
    def loss(output: Any) -> torch.Tensor:
        part = select(output)
        parts: tuple[torch.Tensor, ...] = part if isinstance(part, tuple) else (part,)
        total = parts[0].sum()
        for item in parts[1:]:
            total = total + item.sum()
        return total
    return loss


def assert_matches_torch(result: Explanation, model: nn.Module, inputs: list[torch.Tensor],
                         loss: Callable[[Any], torch.Tensor]) -> None:
    """Every check verified; both passes' module hooks got what torch's own hooks get; every
    final `.grad` is torch's."""
    walk = result.walk
    assert walk.checks(), "a walk with no checks proves nothing"
    assert result.failures() == []
    for mode in ("legacy", "full"):
        assert_module_hooks_match(walk, mode, hook_calls(copy.deepcopy(model), leaves(inputs),
                                                         mode, loss))
    expected = plain_grads(model, inputs, loss)
    for walk_pass in walk.passes:
        assert sorted(grad.name for grad in walk_pass.grads) == sorted(expected)
        for grad in walk_pass.grads:
            want = expected[grad.name]
            if want is None:
                assert grad.value is None, grad.name
            else:
                assert_close(recorded(grad.value), want, f"[{walk_pass.mode}] {grad.name}")


# --- RNNs ---------------------------------------------------------------------------------------

RNN_CASES = [
    # (id, factory, input shape, output path, what plain torch backpropagates)
    ("lstm_out", make_lstm, (5, 2, 3), "0", lambda out: out[0]),
    ("lstm_h", make_lstm, (5, 2, 3), "1.0", lambda out: out[1][0]),
    ("lstm_c", make_lstm, (5, 2, 3), "1.1", lambda out: out[1][1]),
    ("lstm_h_and_c", make_lstm, (5, 2, 3), "1", lambda out: out[1]),
    ("lstm2_batch_first_out", lambda: nn.LSTM(3, 4, num_layers=2, batch_first=True),
     (2, 5, 3), "0", lambda out: out[0]),
    ("lstm2_batch_first_c", lambda: nn.LSTM(3, 4, num_layers=2, batch_first=True),
     (2, 5, 3), "1.1", lambda out: out[1][1]),
    ("gru_out", lambda: nn.GRU(3, 4), (5, 2, 3), "0", lambda out: out[0]),
    ("gru_h", lambda: nn.GRU(3, 4), (5, 2, 3), "1", lambda out: out[1]),
    ("gru2_batch_first_h", make_gru_2_layers_batch_first, (2, 5, 3), "1", lambda out: out[1]),
    ("tagger_logits", make_tagger, (5, 2, 3), "0", lambda out: out[0]),
    ("tagger_h", make_tagger, (5, 2, 3), "1.0", lambda out: out[1][0]),
    ("tagger_gru2_batch_first_h", lambda: Tagger("gru", 2, True), (2, 5, 3), "1",
     lambda out: out[1]),
    ("unrolled_cell_all_steps", Unrolled, (4, 2, 3), "0", lambda out: out[0]),
    ("unrolled_cell_last_h", Unrolled, (4, 2, 3), "1", lambda out: out[1]),
]


@pytest.mark.parametrize(("make", "shape", "path", "select"),
                         [case[1:] for case in RNN_CASES], ids=[case[0] for case in RNN_CASES])
def test_rnn_output_selected_walks_as_torch_runs_it(
        make: Callable[[], nn.Module], shape: tuple[int, ...], path: str, select: Select) -> None:
    model = model_of(make)
    inputs = torch_inputs(shape)
    result = explain(model, *leaves(inputs), output=path)
    assert_matches_torch(result, model, inputs, summed(select))


def test_lstm_full_hook_grad_output_for_h_c_is_none_and_legacy_sees_the_node_outputs() -> None:
    """nn.LSTM returns (out, (h, c)). Loss of out only: the full hook's grad_output is
    (∂loss/∂out, None), None for the (h, c) tuple, which full hooks cannot see; the legacy hook
    sits on the RNN node and gets its three outputs' gradients, None for h and c. Loss of h
    only: the full hook never fires (no gradient passes its output wrapper), the legacy one
    gets (None, ∂loss/∂h, None)."""
    model = model_of(make_tagger)
    inputs = torch_inputs((5, 2, 3))
    of_out = explain(model, *leaves(inputs), output="0").walk
    full = event(of_out, "full", "full_backward", "rnn")
    grad_output = args_of(full, "grad_output")
    assert len(grad_output) == 2
    assert grad_output[0].meaning is not None and grad_output[0].meaning.wrt.startswith("rnn:")
    assert grad_output[1].value is None and grad_output[1].meaning is None
    legacy = args_of(event(of_out, "legacy", "backward", "rnn"), "grad_output")
    assert [arg.value is None for arg in legacy] == [False, True, True]
    of_h = explain(model, *leaves(inputs), output="1.0").walk
    assert events(of_h, "full", "full_backward", "rnn") == []
    legacy = args_of(event(of_h, "legacy", "backward", "rnn"), "grad_output")
    assert [arg.value is None for arg in legacy] == [True, False, True]
    assert legacy[1].check is not None and legacy[1].check.verified


def test_the_diff_says_why_the_lstm_full_hook_has_none_and_does_not_fire() -> None:
    model = model_of(make_lstm)
    inputs = torch_inputs((5, 2, 3))
    of_out = explain(model, *leaves(inputs), output="0").diff()
    notes = [finding.text for module in of_out.modules for call in module.calls
             for finding in call.findings]
    assert any("output 1 is not a tensor" in note for note in notes), notes
    of_c = explain(model, *leaves(inputs), output="1.1").diff()
    notes = [finding.text for module in of_c.modules for call in module.calls
             for finding in call.findings]
    assert any("full never fires" in note and "output 1 is not a tensor" in note
               for note in notes), notes


def test_the_chain_rule_of_the_rnn_node_starts_from_the_output_that_got_a_gradient() -> None:
    """With a loss of h only, the RNN node's first output (out) gets no gradient; its chain-rule
    line starts from h's: ∂(h.sum())/∂h = ones of h's shape (one layer: [batch, hidden])."""
    result = explain(model_of(make_lstm), *leaves(torch_inputs((5, 2, 3))), output="1.0")
    derivation = result.walk.derivations[0]
    rnn = [line for line in derivation.lines
           if len(line.terms) > 1 and any(term.wrt == "weight_ih_l0" for term in line.terms)]
    assert len(rnn) == 1
    assert rnn[0].upstream is not None
    assert_close(recorded(rnn[0].upstream), torch.ones(2, 4), "RNN node upstream")
    assert all(term.check is not None and term.check.verified for term in rnn[0].terms)


# --- dicts, nesting, dataclasses ------------------------------------------------------------------

STRUCT_CASES = [
    ("dict_logits", make_dict_out, "logits", lambda out: out["logits"]),
    ("dict_hidden", make_dict_out, "hidden", lambda out: out["hidden"]),
    ("nested_0_1", make_nested_out, "0.1", lambda out: out[0][1]),
    ("nested_0", make_nested_out, "0", lambda out: out[0]),
    ("dataclass_field", StructOut, "1.score", lambda out: out[1].score),
    ("namedtuple_by_name", StructOut, "1.parts.extra", lambda out: out[1].parts.extra),
    ("namedtuple_by_index", StructOut, "1.parts.0", lambda out: out[1].parts[0]),
    ("dataclass_whole", StructOut, "1", lambda out: (out[1].score, *out[1].parts)),
    ("dotted_key", DottedKeys, "head.logits", lambda out: out["head.logits"]),
    ("dotted_key_nested", DottedKeys, "nested.body.out", lambda out: out["nested"]["body.out"]),
]


@pytest.mark.parametrize(("make", "path", "select"), [case[1:] for case in STRUCT_CASES],
                         ids=[case[0] for case in STRUCT_CASES])
def test_structured_output_selected_walks_as_torch_runs_it(
        make: Callable[[], nn.Module], path: str, select: Select) -> None:
    model = model_of(make)
    inputs = torch_inputs((4, 3))
    result = explain(model, *leaves(inputs), output=path)
    assert_matches_torch(result, model, inputs, summed(select))


def test_a_path_may_be_a_sequence_or_an_index_in_the_api() -> None:
    model = model_of(make_nested_out)
    inputs = torch_inputs((4, 3))
    paths: list[tuple[int, int] | list[str | int]] = [(0, 1), ["0", 1]]
    for output in paths:
        result = explain(model, *leaves(inputs), output=output)
        assert_matches_torch(result, model, inputs, summed(lambda out: out[0][1]))
    result = explain(model, *leaves(inputs), output=1)
    assert_matches_torch(result, model, inputs, summed(lambda out: out[1]))


@pytest.mark.parametrize("loss", ["sum", "mean"])
def test_without_a_path_every_differentiable_tensor_is_reduced_and_added(loss: str) -> None:
    """The default for a structured output: each floating tensor that requires grad, reduced
    by --loss, the results added (the integer argmax and the string are left out)."""
    model = model_of(make_dict_out)
    inputs = torch_inputs((4, 3))
    result = explain(model, *leaves(inputs), loss=loss)

    def reduced(output: Any) -> torch.Tensor:
        parts: list[torch.Tensor] = [output["logits"], output["hidden"]]
        each = [part.sum() if loss == "sum" else part.mean() for part in parts]
        return each[0] + each[1]

    expected = plain_grads(model, inputs, reduced)
    assert result.failures() == []
    for grad in result.walk.passes[0].grads:
        want = expected[grad.name]
        assert want is not None
        assert_close(recorded(grad.value), want, grad.name)


def test_mean_of_the_selected_part() -> None:
    model = model_of(make_lstm)
    inputs = torch_inputs((5, 2, 3))
    result = explain(model, *leaves(inputs), output="1.0", loss="mean")
    expected = plain_grads(model, inputs, lambda out: out[1][0].mean())
    assert result.failures() == []
    for grad in result.walk.passes[1].grads:
        want = expected[grad.name]
        assert want is not None
        assert_close(recorded(grad.value), want, grad.name)


BAD_PATHS = [
    # (model, path, what the one line must name)
    (make_lstm, "2", ("output path '2'", "output (a tuple) has no '2', only 0, 1",
                      "the output's tensors are at 0, 1.0, 1.1")),
    (make_lstm, "0.1", ("output path '0.1'", "output[0] is a tensor, it has no parts",
                        "1.0, 1.1")),
    (make_dict_out, "logit", ("output path 'logit'", "has no 'logit', only logits, hidden, "
                              "argmax, note", "the output's tensors are at logits, hidden, "
                              "argmax")),
    (make_dict_out, "argmax", ("output path 'argmax'", "no floating tensor that requires grad",
                               "the ones that do are at logits, hidden")),
    (nn.Linear, "0", ("output path '0'", "single tensor: leave out the output path")),
]


@pytest.mark.parametrize(("make", "path", "says"), BAD_PATHS,
                         ids=[f"{index}_{case[1]}" for index, case in enumerate(BAD_PATHS)])
def test_a_bad_path_names_itself_and_the_choices(make: Callable[..., nn.Module], path: str,
                                                 says: tuple[str, ...]) -> None:
    model = model_of(lambda: make(3, 4) if make is nn.Linear else make())
    inputs = torch_inputs((5, 2, 3) if make is make_lstm else (4, 3))
    with pytest.raises(OutputPathError) as raised:
        explain(model, *leaves(inputs), output=path)
    assert raised.value.exit_code == 2
    line = raised.value.one_line()
    assert "\n" not in line
    for fragment in says:
        assert fragment in line, line


@pytest.mark.parametrize("output", ["", "a..b", " ", (), (1.5,), ("a.b",), True])
def test_a_malformed_path_is_refused_before_running(output: Any) -> None:
    with pytest.raises(GradexplainError) as raised:
        explain(model_of(make_lstm), torch.randn(5, 2, 3), output=output)
    assert raised.value.exit_code == 2
    assert "output=" in raised.value.one_line()


# --- the command line ---------------------------------------------------------------------------


def json_grads(doc: dict[str, Any], mode: str) -> dict[str, Any]:
    found = [item for item in doc["passes"] if item["mode"] == mode]
    assert len(found) == 1
    grads: dict[str, Any] = found[0]["grads"]
    return grads


def assert_json_grads(doc: dict[str, Any], expected: dict[str, torch.Tensor | None]) -> None:
    for mode in ("legacy", "full"):
        grads = json_grads(doc, mode)
        assert sorted(grads) == sorted(expected)
        for name, want in expected.items():
            if want is None:
                assert grads[name] is None, name
            else:
                assert_close(torch.tensor(grads[name], dtype=torch.float64), want,
                             f"[{mode}] {name}")


@pytest.mark.parametrize(("factory", "shape", "path", "select"), [
    ("make_lstm", "5x2x3", "0", lambda out: out[0]),
    ("make_lstm", "5x2x3", "1.1", lambda out: out[1][1]),
    ("make_gru_2_layers_batch_first", "2x5x3", "1", lambda out: out[1]),
    ("make_dict_out", "4x3", "logits", lambda out: out["logits"]),
    ("make_nested_out", "4x3", "0.1", lambda out: out[0][1]),
])
def test_loss_of_on_the_command_line(cli: CLI, factory: str, shape: str, path: str,
                                     select: Select) -> None:
    doc = walk_json(cli, f"{THIS}:{factory}", "--input", shape, "--loss-of", path)
    model = model_of(globals()[factory])
    inputs = torch_inputs(tuple(int(size) for size in shape.split("x")))
    assert_json_grads(doc, plain_grads(model, inputs, summed(select)))
    checks = [arg["check"] for walk_pass in doc["passes"] for item in walk_pass["events"]
              for arg in item["args"] if arg["check"] is not None]
    assert checks and all(check["verified"] for check in checks)


def test_the_text_output_says_what_the_loss_is_of(cli: CLI) -> None:
    result = cli("walk", f"{THIS}:make_lstm", "--input", "5x2x3", "--loss-of", "1.0",
                 "--loss", "mean")
    assert result.code == 0, result.stderr
    assert "loss = mean(output[1][0])" in result.stdout


def test_a_bad_path_on_the_command_line_is_one_line_listing_the_choices(cli: CLI) -> None:
    result = cli("walk", f"{THIS}:make_tagger", "--input", "5x2x3", "--loss-of", "1.2")
    assert_one_error_line(result, ("output path '1.2'", "has no '2', only 0, 1",
                                   "the output's tensors are at 0, 1.0, 1.1"))


def test_loss_of_is_explained_in_help(cli: CLI) -> None:
    result = cli("walk", "--help")
    assert result.code == 0
    text = " ".join(result.stdout.split())
    assert "--loss-of" in text and "1.0 is output[1][0]" in text


def test_loss_of_in_a_saved_session_is_refused_on_load(cli: CLI, tmp_path: Any) -> None:
    saved = tmp_path / "s.json"
    result = cli("walk", f"{THIS}:make_dict_out", "--input", "4x3", "--loss-of", "logits",
                 "--save", str(saved))
    assert result.code == 0, result.stderr
    again = cli("walk", "--load", str(saved), "--loss-of", "logits")
    assert_one_error_line(again, ("leave out --loss-of",))
    doc = json.loads(cli("walk", "--load", str(saved), "-f", "json").stdout)
    assert doc["passes"][0]["grads"]


def test_diff_and_report_take_loss_of_too(cli: CLI) -> None:
    diff = cli("diff", f"{THIS}:make_tagger", "--input", "5x2x3", "--loss-of", "1.0")
    assert diff.code == 0, diff.stderr
    assert "full never fires" in " ".join(diff.stdout.split())
    report = cli("report", f"{THIS}:make_dict_out", "--input", "4x3", "--loss-of", "hidden")
    assert report.code == 0, report.stderr
    assert "loss = output['hidden'].sum()" in report.stdout


class WholeResult(nn.Module):
    """A dataclass as the whole output: torch's legacy hooks index it with [0] and raise."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> Result:
        y = self.lin(x)
        return Result(y, Pair(y.exp(), y.sin()))


@pytest.mark.parametrize("output", [None, "score"])
def test_a_dataclass_as_the_whole_output_is_refused_saying_why(output: str | None) -> None:
    model = WholeResult()
    out = model(torch.randn(2, 3))  # plain torch runs it; only a legacy hook cannot
    assert isinstance(out, Result)
    probe = WholeResult()
    probe.register_backward_hook(lambda module, grad_in, grad_out: None)
    with pytest.raises(TypeError):
        probe(torch.randn(2, 3))
    with pytest.raises(GradexplainError) as refused:
        explain(model, (2, 3), output=output)
    message = str(refused.value)
    assert "returned a Result" in message and "legacy backward hook" in message
