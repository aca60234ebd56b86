"""Reading `gradexplain walk SPEC --format json` in tests (DESIGN section 5, the contract).

Only the command line is used: a walk runs in a subprocess, its stdout is parsed as JSON, and the
helpers here pick events and arguments out of it and compare them with tensors the tests compute
in plain PyTorch. Nothing here imports gradexplain.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tests.helpers.cli import run_cli

JSON = dict[str, Any]

SCHEMA = "gradexplain.walk/1"
MODES = ("legacy", "full")
MODULE_BACKWARD_HOOKS = ("backward", "full_backward_pre", "full_backward")
LAYOUTS = ("as-is", "transposed", "reshaped", "summed")
WRAPPER = "BackwardHookFunctionBackward"


@dataclass(frozen=True)
class Walk:
    """One finished walk: exit code, the parsed JSON document, and stderr for messages."""

    spec: str
    code: int
    doc: JSON
    stderr: str

    def passes(self) -> list[JSON]:
        passes: list[JSON] = self.doc["passes"]
        return passes

    def pass_(self, mode: str) -> JSON:
        found = [item for item in self.passes() if item.get("mode") == mode]
        assert len(found) == 1, f"{self.spec}: expected one {mode!r} pass, got {len(found)}"
        return found[0]

    def events(self, mode: str, hook: str | None = None, target: str | None = None,
               node: str | None = None) -> list[JSON]:
        """The events of one pass, in order, optionally filtered by hook kind, target, node."""
        return [event for event in self.pass_(mode)["events"]
                if (hook is None or event["hook"] == hook)
                and (target is None or event["target"] == target)
                and (node is None or event["node"] == node)]

    def event(self, mode: str, hook: str, target: str) -> JSON:
        """The one event of this hook kind on this target (fails if there are 0 or several)."""
        found = self.events(mode, hook, target)
        assert len(found) == 1, (
            f"{self.spec} [{mode}]: expected exactly one {hook!r} event on {target!r}, got "
            f"{len(found)}; targets with {hook!r} events: "
            f"{sorted({event['target'] for event in self.events(mode, hook)})}")
        return found[0]

    def grads(self, mode: str) -> JSON:
        grads: JSON = self.pass_(mode)["grads"]
        return grads


def walk(path: Path | str) -> Walk:
    """Run `gradexplain walk PATH --format json`; it must exit 0 or 1 and print one JSON object."""
    result = run_cli("walk", str(path), "--format", "json")
    assert result.code in (0, 1), (
        f"walk {path} exited {result.code} (0 or 1 expected)\n"
        f"stderr: {result.stderr[-3000:]}\nstdout: {result.stdout[:1000]}")
    try:
        doc = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"walk {path}: stdout is not one JSON object ({exc}); "
                             f"stdout starts {result.stdout[:300]!r}") from exc
    assert isinstance(doc, dict), f"walk {path}: the JSON is a {type(doc).__name__}, not an object"
    return Walk(str(path), result.code, doc, result.stderr)


def run_all(paths: Sequence[Path | str]) -> dict[str, Walk | AssertionError]:
    """Walk several specs side by side; a failing walk leaves its AssertionError in its place."""

    def one(path: Path | str) -> Walk | AssertionError:
        try:
            return walk(path)
        except AssertionError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, paths))
    return {str(path): result for path, result in zip(paths, results, strict=True)}


def get(results: dict[str, Walk | AssertionError], key: str) -> Walk:
    """One result of `run_all`, re-raising its failure in the test that reads it."""
    result = results[key]
    if isinstance(result, AssertionError):
        raise result
    return result


# --- arguments ---------------------------------------------------------------------------------


def arg(event: JSON, name: str) -> JSON:
    """The argument called `name` ("grad_input[0]", "grad", ...) of an event."""
    found = [item for item in event["args"] if item["name"] == name]
    assert len(found) == 1, (
        f"{describe(event)}: expected one argument {name!r}, got "
        f"{[item['name'] for item in event['args']]}")
    item: JSON = found[0]
    return item


def args_named(event: JSON, prefix: str) -> list[JSON]:
    """The arguments `prefix[0]`, `prefix[1]`, ... of an event, in index order (no gaps)."""
    found = [item for item in event["args"] if item["name"].startswith(prefix + "[")]
    names = [item["name"] for item in found]
    assert names == [f"{prefix}[{i}]" for i in range(len(found))], (
        f"{describe(event)}: {prefix} arguments out of order or with gaps: {names}")
    return found


def describe(event: JSON) -> str:
    return (f"event #{event.get('seq')} {event.get('hook')} on {event.get('target')!r} "
            f"(node {event.get('node')})")


def value_tensor(item: JSON) -> torch.Tensor:
    """An argument's value as a float64 tensor (fails for a null value or a summary)."""
    assert item.get("value") is not None, f"argument {item['name']} has no value: {item}"
    return torch.tensor(item["value"], dtype=torch.float64)


def assert_value(item: JSON, expected: torch.Tensor, what: str = "",
                 rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """The argument's shape and value equal `expected` (computed in plain torch)."""
    label = f"{what} {item['name']}".strip()
    want = expected.detach().to(torch.float64)
    assert item.get("shape") == list(want.shape), (
        f"{label}: shape {item.get('shape')}, torch says {list(want.shape)}")
    got = value_tensor(item)
    assert tuple(got.shape) == tuple(want.shape), (
        f"{label}: value has shape {list(got.shape)}, torch says {list(want.shape)}")
    assert torch.allclose(got, want, rtol=rtol, atol=atol), (
        f"{label}: value {got.tolist()}, torch says {want.tolist()}")


def assert_none(item: JSON, what: str = "") -> None:
    """Torch passed None here: value, meaning and check are all null."""
    label = f"{what} {item['name']}".strip()
    assert item.get("value") is None, f"{label}: torch passes None, got value {item.get('value')}"
    assert item.get("meaning") is None, f"{label}: a None has no meaning, got {item['meaning']}"
    assert item.get("check") is None, f"{label}: a None has no check, got {item['check']}"


def assert_meaning(item: JSON, *, of: str, wrt: str, layout: str = "as-is",
                   only: bool | None = None, what: str = "") -> None:
    """The label: derivative of `of` with respect to `wrt`, in this layout; `only=True` means a
    one-use contribution (its text says "only"), `only=False` that the text must not say so."""
    label = f"{what} {item['name']}".strip()
    meaning = item.get("meaning")
    assert meaning is not None, f"{label}: a gradient argument needs a meaning, got null"
    got = (meaning.get("of"), meaning.get("wrt"), meaning.get("layout"))
    assert got == (of, wrt, layout), (
        f"{label}: meaning (of, wrt, layout) = {got}, expected {(of, wrt, layout)}; "
        f"text {meaning.get('text')!r}")
    if only is not None:
        says_only = "only" in str(meaning.get("text", ""))
        assert says_only == only, (
            f"{label}: text {meaning.get('text')!r} should{'' if only else ' not'} say 'only'")


def assert_verified(item: JSON, what: str = "") -> None:
    label = f"{what} {item['name']}".strip()
    check = item.get("check")
    assert check is not None, f"{label}: a gradient argument needs a check, got null"
    assert check.get("verified") is True, f"{label}: check not verified: {check}"
    error = check.get("max_abs_err")
    assert isinstance(error, (int, float)) and 0 <= error < 1e-3, (
        f"{label}: max_abs_err should be a small number, got {error!r}")


def assert_grad_arg(item: JSON, expected: torch.Tensor, *, of: str, wrt: str,
                    layout: str = "as-is", only: bool | None = None, what: str = "") -> None:
    """Value (against torch), meaning and a verified check, in one call."""
    assert_value(item, expected, what)
    assert_meaning(item, of=of, wrt=wrt, layout=layout, only=only, what=what)
    assert_verified(item, what)


# --- whole documents ---------------------------------------------------------------------------


def all_args(doc: JSON) -> Iterator[tuple[str, JSON, JSON]]:
    """(mode, event, argument) for every argument of every event of every pass."""
    for pass_ in doc["passes"]:
        for event in pass_["events"]:
            for item in event["args"]:
                yield pass_["mode"], event, item


def contract_problems(doc: JSON) -> list[str]:
    """Everything in a walk document that breaks the JSON contract's rules on labels and checks:
    a failed check; a gradient without meaning or check; a forward value or None with one."""
    problems: list[str] = []
    for mode, event, item in all_args(doc):
        where = f"[{mode}] {describe(event)} {item.get('name')}"
        check, meaning = item.get("check"), item.get("meaning")
        if event["phase"] == "forward":
            if check is not None or meaning is not None:
                problems.append(f"{where}: a forward value has meaning/check {meaning}/{check}")
            continue
        if item.get("value") is None and item.get("summary") is None:
            if check is not None or meaning is not None:
                problems.append(f"{where}: a None has meaning/check {meaning}/{check}")
            continue
        if meaning is None:
            problems.append(f"{where}: gradient without meaning")
        elif meaning.get("layout") not in LAYOUTS:
            problems.append(f"{where}: unknown layout {meaning.get('layout')!r}")
        if check is None:
            problems.append(f"{where}: gradient without check")
        elif check.get("verified") is not True:
            problems.append(f"{where}: check {check} (meaning {meaning})")
    return problems


def assert_grads(walk_: Walk, expected: dict[str, torch.Tensor | None],
                 modes: Iterable[str] = MODES, names: Iterable[str] | None = None) -> None:
    """Each pass's `grads` (all leaves, by canonical name) equal `.grad` from plain torch.

    With `names`, only those leaves are compared (the set of keys is still checked in full).
    """
    for mode in modes:
        grads = walk_.grads(mode)
        assert set(grads) == set(expected), (
            f"{walk_.spec} [{mode}]: grads has leaves {sorted(grads)}, torch's leaves are "
            f"{sorted(expected)}")
        for name in expected if names is None else names:
            want = expected[name]
            got = grads[name]
            if want is None:
                assert got is None, (
                    f"{walk_.spec} [{mode}]: {name}.grad is None in torch, got {got}")
                continue
            assert got is not None, f"{walk_.spec} [{mode}]: {name}.grad is null, torch: {want}"
            got_tensor = torch.tensor(got, dtype=torch.float64)
            want64 = want.detach().to(torch.float64)
            assert got_tensor.shape == want64.shape and torch.allclose(
                got_tensor, want64, rtol=1e-5, atol=1e-6), (
                f"{walk_.spec} [{mode}]: {name}.grad = {got}, torch says {want64.tolist()}")
