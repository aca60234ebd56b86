"""Hostile specs against the spec language's bounds (issue 19, "bounds"): arithmetic on written
numbers and the total work a forward asks for. Each is refused by the real `gradexplain validate`
in a subprocess, fast (a timeout turns a hang into a failure), with exit 2 and one line that names
the file; a spec just under each bound still validates."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import REPO

# Validate is refused or accepted in well under a second; the limit is for a loaded machine. The
# hostile specs hung (10 ** 10 ** 8) or ran for minutes before the bounds.
VALIDATE_TIMEOUT = 15.0

Write = Callable[[str], Path]


def validate(path: Path, *more: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "gradexplain", "validate", str(path), *more],
                          capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=VALIDATE_TIMEOUT, check=False)


def refused(path: Path) -> str:
    """The one error line of a refused spec, after the checks every refusal must pass."""
    done = validate(path)
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {path}:"), lines[0]
    return lines[0]


def accepted(path: Path) -> None:
    done = validate(path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def one_step(expression: str) -> str:
    return ("inputs:\n  x: {rand: [3], requires_grad: true}\n"
            f"forward:\n  - \"y = {expression}\"\n  - \"z = sum(y)\"\nbackward: z\n")


# --- arithmetic on written numbers -------------------------------------------------------------

# (the expression, a word our message must hold)
BAD_ARITHMETIC = [
    ("x * (1/0)", "zero"),
    ("x * (1.5 / 0.0)", "zero"),
    ("x * 0.0 ** -1", "zero"),
    ("x / (0 ** -2)", "zero"),
    ("x * (0 - 8) ** 0.5", "real number"),
    ("x + (-(8) ** 0.5 - (0 - 2) ** 1.5)", "real number"),
    ("x * (10 ** 10 ** 8)", "too large"),
    ("x * (10 ** 10 ** 30)", "too large"),
    ("x * (2 ** 128)", "too large"),
    ("x * 0.5 ** -200", "too large"),
    ("x * (1e38 * 10)", "too large"),
    ("x * (3e38 + 3e38)", "too large"),
    ("x * (1e38 * 1e38 / 1e38)", "too large"),  # too large on the way
]


@pytest.mark.parametrize(("expression", "word"), BAD_ARITHMETIC,
                         ids=[expression for expression, _ in BAD_ARITHMETIC])
def test_constant_arithmetic_is_refused_at_validate(expression: str, word: str,
                                                    write_spec: Write) -> None:
    message = refused(write_spec(one_step(expression)))
    assert ":4:" in message, message  # the line of the step, then its column
    assert "forward[0]" in message, message  # the key path
    assert expression[:8] in message, message  # the step, quoted
    assert word in message, message


@pytest.mark.parametrize("expression", [
    "x * (2 ** 127)",           # 1.7e38: under float32's largest, 3.4e38
    "x * (3.4e38 - 1e30)",
    "x * (1 ** 10 ** 30)",      # a huge exponent of 1 is 1, computed in no time
    "x * ((0 - 1) ** 10 ** 20)",
    "x * ((0 - 8) ** 2.0)",     # a negative base to a whole (float) power is real
    "x * (0 ** 0) / (0.5 ** 100)",
])
def test_constant_arithmetic_within_bounds_validates(expression: str, write_spec: Write) -> None:
    accepted(write_spec(one_step(expression)))


def test_folded_constants_are_kept_for_later_steps(write_spec: Write) -> None:
    """The checker keeps each folded value (a negated or named number too), so a constant step
    read later folds on: 2 ** 3 / 4 - -1 is 3, and c * c is 9; 9 ** 41 is over the bound."""
    spec = ("inputs:\n  x: {rand: [3], requires_grad: true}\n"
            "forward:\n  - \"c = 2 ** 3 / 4 - -1\"\n  - \"d = c * c\"\n  - \"e = d ** 41\"\n"
            "  - \"y = x * e\"\n  - \"z = sum(y)\"\nbackward: z\n")
    assert 9.0 ** 41 > 3.4028234663852886e38 > 9.0 ** 40
    message = refused(write_spec(spec))
    assert "forward[2]" in message and "too large" in message, message
    accepted(write_spec(spec.replace("d ** 41", "d ** 40")))


# --- total work: steps run with module calls expanded --------------------------------------------

def doubling(levels: int) -> str:
    """Modules m1 .. m<levels>, each calling its child twice: 2**levels calls of the innermost,
    from a spec of a few hundred bytes per level."""
    def module(level: int, indent: int) -> str:
        pad = " " * indent
        if level == levels:
            return f"{pad}forward: {{args: [a], steps: ['b = a * 2'], returns: b}}\n"
        child = f"m{level + 1}"
        return (f"{pad}modules:\n{pad}  {child}:\n" + module(level + 1, indent + 4)
                + f"{pad}forward: {{args: [a], steps: ['b = {child}(a)', 'c = {child}(b)'], "
                  "returns: c}\n")
    return ("inputs:\n  x: {rand: [2], requires_grad: true}\nmodules:\n  m1:\n" + module(1, 4)
            + "forward: ['y = m1(x)', 'z = sum(y)']\nbackward: z\n")


def test_modules_that_double_at_each_level_are_refused(write_spec: Write) -> None:
    """12 levels: 2**12 innermost calls, 6,143 steps in all (the issue's spec walked 131 s)."""
    text = doubling(12)
    assert len(text) < 2_000
    message = refused(write_spec(text))
    assert "module call" in message and "4,000" in message, message
    assert "m1" in message, message  # the module whose calls make the steps


def test_modules_that_double_under_the_bound_validate(write_spec: Write) -> None:
    accepted(write_spec(doubling(11)))  # 3,071 steps


def calls_of_a_module(calls: int, steps: int, extra_top_steps: int = 0,
                      backward: str = "y{calls}") -> str:
    """A module of `steps` steps called `calls` times in a chain: calls * (1 + steps) steps run,
    plus the extra top-level ones."""
    body = ", ".join(f"'b{i} = {'a' if i == 0 else f'b{i - 1}'} * 2'" for i in range(steps))
    top = [f"'y{i + 1} = m({'x' if i == 0 else f'y{i}'})'" for i in range(calls)]
    top += [f"'e{i} = x * 3'" for i in range(extra_top_steps)]
    return ("inputs:\n  x: {value: 1.0, requires_grad: true}\n"
            f"modules:\n  m:\n    forward: {{args: [a], steps: [{body}], returns: b{steps - 1}}}\n"
            f"forward: [{', '.join(top)}]\nbackward: {backward.format(calls=calls)}\n")


def test_steps_run_exactly_at_the_bound_validate(write_spec: Write) -> None:
    accepted(write_spec(calls_of_a_module(40, 99)))  # 40 * 100 = 4,000
    message = refused(write_spec(calls_of_a_module(40, 99, extra_top_steps=1)))
    assert "4,001 steps" in message, message


def test_a_thousand_layers_stay_under_the_bound(write_spec: Write) -> None:
    """bench/'s scaling spec (issue 20 wants 1,000 layers to walk): Linear and Tanh per layer;
    999 layers are 1,998 steps, within the 2,000 steps a spec may write."""
    layers = 999
    lines = ["inputs:", "  x: {randn: [4, 8], requires_grad: true}", "layers:"]
    lines += [f"  l{i}: {{Linear: {{in_features: 8, out_features: 8}}}}\n  a{i}: Tanh"
              for i in range(layers)]
    previous = "x"
    lines.append("forward:")
    for i in range(layers):
        lines += [f'  - "h{i} = l{i}({previous})"', f'  - "t{i} = a{i}(h{i})"']
        previous = f"t{i}"
    lines += [f'  - "loss = sum({previous})"', "backward: loss"]
    accepted(write_spec("\n".join(lines) + "\n"))


# --- total work: backward runs -------------------------------------------------------------------

def backward_items(items: int, times: int, grads: int = 0) -> str:
    backward = "\n".join(f"  - {{of: z, times: {times}, retain_graph: true}}" for _ in range(items))
    grad = ("grad:\n" + "\n".join("  - {of: z, wrt: x, retain_graph: true}" for _ in range(grads))
            + "\n") if grads else ""
    return ("inputs:\n  x: {rand: [3], requires_grad: true}\nforward: ['z = sum(x * 2)']\n"
            f"backward:\n{backward}\n{grad}")


def test_a_hundred_backward_items_of_a_hundred_times_are_refused(write_spec: Write) -> None:
    message = refused(write_spec(backward_items(100, 100)))
    assert "backward runs" in message and "200" in message and "times" in message, message


def test_backward_runs_at_the_bound_validate(write_spec: Write) -> None:
    accepted(write_spec(backward_items(2, 100)))
    accepted(write_spec(backward_items(2, 99, grads=2)))
    message = refused(write_spec(backward_items(2, 99, grads=3)))  # 201 runs
    assert "201 backward runs" in message and "grad" in message, message


def test_backward_runs_times_forward_steps_are_bounded(write_spec: Write) -> None:
    """10 calls of a 99-step module run 1,000 steps: 20 backward runs go back through 20,000."""
    spec = calls_of_a_module(10, 99, backward="{{of: y{calls}, times: 20, retain_graph: true}}")
    accepted(write_spec(spec))
    message = refused(write_spec(spec.replace("times: 20", "times: 21")))
    assert "21 backward runs" in message and "1,000 steps" in message, message
    assert "20,000" in message, message


def elementwise(times: int) -> str:
    """`exp` of a 3162x3162 input: 19,996,489 elements with its result, within every bound on
    tensors, and no multiply-add at all."""
    return ("inputs:\n  x: {randn: [3162, 3162], requires_grad: true}\n"
            "forward: ['a = exp(x)', 'c = sum(a)']\n"
            f"backward: {{of: c, times: {times}, retain_graph: true}}\n")


def test_backward_runs_times_the_tensors_elements_are_bounded(write_spec: Write) -> None:
    """Each backward run's gradients are recorded and checked anew (a hundred runs of this took
    over 5 minutes and 10 GB): the runs times all the tensors' elements are bounded by 4 * 10**8;
    20 runs are within it, 21 are not."""
    elements = 3162 * 3162 * 2 + 1
    assert 20 * elements <= 4 * 10**8 < 21 * elements
    accepted(write_spec(elementwise(20)))
    message = refused(write_spec(elementwise(21)))
    assert f"{21 * elements:,} in all" in message and "21 backward runs" in message, message


# --- tensors made inside a step ------------------------------------------------------------------

def outer_product(size: int, terms: int = 1) -> str:
    product = " + ".join(["x[:, None] * x[None, :]"] * terms)
    return (f"inputs:\n  x: {{rand: [{size}], requires_grad: true}}\n"
            f"forward:\n  - \"y = sum({product})\"\nbackward: y\n")


def test_an_outer_product_inside_a_step_is_bounded(write_spec: Write) -> None:
    """15,000 elements in, 225,000,000 inside `sum(...)` (2 GB): over the 10,000,000 bound."""
    message = refused(write_spec(outer_product(15_000)))
    assert "[15000, 15000]" in message and "10,000,000" in message, message
    accepted(write_spec(outer_product(3_000)))  # 9,000,000 elements inside


def test_tensors_made_inside_steps_count_toward_the_total(write_spec: Write) -> None:
    """Each product is 9,000,000 elements, and so is their sum: 27,000,000 with two of them,
    over the 20,000,000 all the spec's tensors may hold."""
    message = refused(write_spec(outer_product(3_000, terms=2)))
    assert "20,000,000" in message and "in all" in message, message


# --- total work: multiply-adds -------------------------------------------------------------------

# The bound, written here as the oracle's number: 10**10 multiply-adds in one forward.
BOUND = 10**10


def linear_spec(batch: int, features: int) -> str:
    return (f"inputs:\n  x: {{zeros: [{batch}, {features}]}}\n"
            f"layers:\n  l: {{Linear: {{in_features: {features}, out_features: {features}}}}}\n"
            "forward: ['y = l(x)', 'z = sum(y)']\nbackward: z\n")


def conv_spec(side: int) -> str:
    """Conv2d(100, 100, kernel_size=10) on one 100-channel image: each output element is a
    100 x 10 x 10 window."""
    return (f"inputs:\n  x: {{zeros: [1, 100, {side}, {side}]}}\n"
            "layers:\n  c: {Conv2d: {in_channels: 100, out_channels: 100, kernel_size: 10}}\n"
            "forward: ['y = c(x)', 'z = sum(y)']\nbackward: z\n")


def product_spec(size: int, how: str) -> str:
    return (f"inputs:\n  a: {{zeros: [{size}, {size}], requires_grad: true}}\n"
            f"  b: {{zeros: [{size}, {size}]}}\n"
            f"forward: ['y = {how}', 'z = sum(y)']\nbackward: z\n")


def module_calls(calls: int, inner_calls: int = 1, times: int = 1) -> str:
    """A module whose Linear(1000, 1000) runs on 1,000 rows (10**9 multiply-adds), called
    `inner_calls` times by an outer module that the forward calls `calls` times."""
    inner = ", ".join(f"'h{i} = m({'a' if i == 0 else f'h{i - 1}'})'" for i in range(inner_calls))
    top = ", ".join(f"'y{i} = outer({'x' if i == 0 else f'y{i - 1}'})'" for i in range(calls))
    return ("inputs:\n  x: {zeros: [1000, 1000], requires_grad: true}\n"
            "modules:\n  outer:\n    modules:\n      m:\n"
            "        layers: {l: {Linear: {in_features: 1000, out_features: 1000}}}\n"
            "        forward: {args: [a], steps: ['b = l(a)']}\n"
            f"    forward: {{args: [a], steps: [{inner}]}}\n"
            f"forward: [{top}, 's = sum(y{calls - 1})']\n"
            f"backward: {{of: s, times: {times}, retain_graph: true}}\n")


@pytest.mark.parametrize(("under", "over", "under_count", "over_count"), [
    (linear_spec(2500, 2000), linear_spec(2501, 2000), 2500 * 2000 * 2000, 2501 * 2000 * 2000),
    (conv_spec(109), conv_spec(110), 100 * 100**2 * 100 * 10 * 10, 100 * 101**2 * 100 * 10 * 10),
    (product_spec(2154, "a @ b"), product_spec(2155, "a @ b"), 2154**3, 2155**3),
    (product_spec(2154, "matmul(a, b)"), product_spec(2155, "matmul(a, b)"), 2154**3, 2155**3),
], ids=["Linear", "Conv2d", "@", "matmul"])
def test_multiply_adds_of_one_layer_are_bounded(under: str, over: str, under_count: int,
                                                over_count: int, write_spec: Write) -> None:
    """Tensors within every element bound can still ask for minutes of arithmetic (eight
    Conv2d(256, 256, 9) on a 48x48 image walked 38 s): the forward's multiply-adds are
    bounded, counted as torch does them (out elements x the weight row or window each needs)."""
    assert under_count <= BOUND < over_count
    accepted(write_spec(under))
    message = refused(write_spec(over))
    assert f"{over_count:,} multiply-adds" in message and f"{BOUND:,}" in message, message


def test_multiply_adds_count_every_module_call(write_spec: Write) -> None:
    """Checked once, counted at every call: 5 calls of a module calling its child twice are 10
    runs of the child's 10**9 multiply-adds, at the bound; a sixth call adds two more."""
    accepted(write_spec(module_calls(5, inner_calls=2)))
    message = refused(write_spec(module_calls(6, inner_calls=2)))
    assert f"{12 * 10**9:,} multiply-adds" in message and "y5 = outer(y4)" in message, message
    accepted(write_spec(module_calls(10)))
    assert "y10" in refused(write_spec(module_calls(11)))


def test_multiply_adds_times_backward_runs_are_bounded(write_spec: Write) -> None:
    """One forward of 10**9 multiply-adds gone back through 50 times is at the bound of
    5 * 10**10; 51 times is over it."""
    accepted(write_spec(module_calls(1, times=50)))
    message = refused(write_spec(module_calls(1, times=51)))
    assert "51 backward runs" in message and f"{51 * 10**9:,}" in message, message


# --- messages ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("written", "number"), [
    ("1e30", 1e30), ("2E-3", 2e-3), ("-3e2", -300.0), (".5e3", 500.0), ("1.5e10", 1.5e10),
    ("7e+1", 70.0),
])
def test_e_notation_that_yaml_reads_as_text_is_explained(written: str, number: float,
                                                         write_spec: Write) -> None:
    """YAML 1.1 reads `1e30` as text; the message says so and what to write, and what it says
    to write is, for PyYAML itself, that number."""
    spec = ("inputs:\n  x: {value: VALUE, requires_grad: true}\n"
            "forward: ['y = x * 2']\nbackward: y\n")
    assert isinstance(yaml.safe_load(written), str)
    message = refused(write_spec(spec.replace("VALUE", written)))
    assert "inputs.x.value" in message and "text" in message and "dot" in message, message
    suggested = message.rsplit("write ", 1)[1].rstrip(")")
    read = yaml.safe_load(suggested)
    assert isinstance(read, float), suggested
    assert math.isclose(read, number, rel_tol=1e-12), suggested
    accepted(write_spec(spec.replace("VALUE", suggested)))


@pytest.mark.parametrize("step", ["y = sum(x.data)", "y = sum((x * 2).data)",
                                  "y = sum(x.T.data)"])
def test_dot_data_suggests_a_function_that_exists(step: str, write_spec: Write) -> None:
    message = refused(write_spec(f"inputs:\n  x: {{rand: [3], requires_grad: true}}\n"
                                 f"forward: ['{step}']\nbackward: y\n"))
    assert "'.data'" in message, message
    assert "data(" not in message, message
    assert "detach(" in message, message
    # ...and detach is a function a step can call: the suggestion validates.
    accepted(write_spec("inputs:\n  x: {rand: [3], requires_grad: true}\n"
                        "forward: ['y = sum(x * detach(x))']\nbackward: y\n"))


def test_a_huge_whole_number_is_named_by_its_digits(write_spec: Write) -> None:
    message = refused(write_spec(f"seed: {2**64}\ninputs:\n  x: {{rand: [3], requires_grad: true}}"
                                 "\nforward: ['y = sum(x)']\nbackward: y\n"))
    assert "seed" in message and "got a 20-digit number" in message, message
    message = refused(write_spec("inputs:\n  x: {rand: [3], requires_grad: true}\n"
                                 "forward: ['y = sum(x)']\n"
                                 f"backward: {{of: y, times: {10**17}}}\n"))
    assert "times" in message and "got an 18-digit number" in message, message
    # Its sign too: -(2**63) - 1 was "a 19-digit number", read as past the top.
    message = refused(write_spec(f"seed: {-2**63 - 1}\ninputs:\n  x: {{rand: [3], "
                                 "requires_grad: true}\nforward: ['y = sum(x)']\nbackward: y\n"))
    assert "seed" in message and "got a negative 19-digit number" in message, message


@pytest.mark.parametrize(("spec", "phrase"), [
    ("inputs:\n  sum: {rand: [3], requires_grad: true}\nforward: ['y = sum * 2']\nbackward: y\n",
     "an input"),
    ("inputs:\n  x: {rand: [3], requires_grad: true}\n"
     "modules:\n  m: {forward: {args: [a], steps: ['c = 2 * 3'], returns: c}}\n"
     "forward: ['y = m(x)']\nbackward: y\n", "a number"),
])
def test_articles_fit_the_word(spec: str, phrase: str, write_spec: Write) -> None:
    message = refused(write_spec(spec))
    assert phrase in message, message
    assert " a input" not in message and " a argument" not in message, message
