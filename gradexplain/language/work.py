"""The total work a spec asks of a walk, bounded at validate time: steps run, backward runs, the
tensors made inside steps (which no name declares), the multiply-adds of its Linear, Conv2d
and matrix products, and the tensor elements every backward run records and checks again.

A spec's size bounds (steps written, tensor elements) do not bound what it asks for: a module that
calls its child twice, 12 levels deep, is a 1 KB spec whose forward runs 16,000 steps (131 s and
63 MB of walk output), and 100 backward items of `times: 100` are 10,000 backward runs (557 s).
Every step a walk runs is traced, labelled and checked, and every backward run fires every hook
again, so the work is counted here as a walk will do it: module calls expanded (multiplied
through nesting), and backward runs times the steps each one goes back through. Counting is
linear in the spec (each module is counted once and its count reused), never expanded.

Small tensors can still ask for much arithmetic: eight Conv2d(256, 256, kernel_size=9) on one
48x48 image hold 4.7 M elements at most but do 9.8e10 multiply-adds per forward, a 38 s walk
(22 s of CPU: a walk computes the forward and its backward about ten times over, in two passes
and the hook-free runs that check every label).
"""

from __future__ import annotations

from gradexplain.errors import SpecLimitError, quoted
from gradexplain.language.expr import BinOp, Call, Expr, Index, Neg, Transpose
from gradexplain.language.model import ModelSpec, ModuleSpec, Step
from gradexplain.language.schema import MAX_ELEMENTS, MAX_TOTAL_ELEMENTS
from gradexplain.language.shapes import Shape, numel, show

# The forward's steps with every module call expanded. bench/'s 1,000-layer spec (issue 20) runs
# 2,000 steps (Linear and Tanh at each layer, all at the top level); twice that leaves room for
# modules called more than once, and stops the doubling spec above at 12 levels (16,380 steps).
MAX_STEPS_RUN = 4_000
# Backward and grad calls, each `times:` counted: 100 items, or one item `times: 100`, and
# some more.
MAX_BACKWARD_RUNS = 200
# Backward runs times the forward's steps: each run goes back through every step's hooks.
# The 1,000-layer spec may be run back through 10 times, a 100-step spec 200 times.
MAX_BACKWARD_WORK = 20_000
# Multiply-adds of one forward, every module call expanded (about 2 s of CPU for a walk here), and
# of one forward times the backward runs (each goes back through them, at about twice the cost).
# A ResNet-50 on a 224x224 image does 4.1e9; these specs are tiny models.
MAX_MULTIPLY_ADDS = 10**10
MAX_BACKWARD_MULTIPLY_ADDS = 5 * 10**10
# The spec's tensor elements (all of them together, as MAX_TOTAL_ELEMENTS counts them) times the
# backward runs: each run's gradients are recorded, summarised and checked anew, and kept until
# the walk ends. `exp` of a 3162x3162 input (20,000,000 elements with its result) run back
# through 10 times took 21 s and 1.6 GB; 100 times, over 5 minutes and 10 GB. The bound lets
# through what the multiply-add bounds do (7,000,000 elements of Linear(1000, 1000) on 1,000
# rows, gone back through 50 times), and that `exp` 20 times.
MAX_BACKWARD_ELEMENTS = 4 * 10**8
# Functions whose result is usually a view of their operand, so not added to the total (reshape
# of a transposed tensor copies; the bound on every single tensor still applies to all of them).
_VIEWS = frozenset({"reshape", "flatten", "transpose", "squeeze", "unsqueeze", "chunk", "detach"})


def check_work(spec: ModelSpec, multiply_adds: int, elements: int) -> int:
    """Refuse a spec whose walk would run more steps or backward runs than the bounds above,
    given the `multiply_adds` of its forward and the `elements` of all its tensors; return the
    number of steps its forward runs."""
    counter = _StepCounter()
    steps_run = 0
    for step in spec.root.steps:
        cost = counter.step(spec.root, step)
        steps_run += cost
        if steps_run > MAX_STEPS_RUN:
            raise SpecLimitError(_too_many_steps(step, cost, steps_run, counter), step.where)
    runs = 0
    places = [(item.times, item.where, "backward") for item in spec.backwards] + [
        (1, item.where, "grad") for item in spec.grads]
    for times, where, what in places:
        runs += times
        if runs > MAX_BACKWARD_RUNS:
            raise SpecLimitError(
                f"with this {what} call the spec asks for {runs:,} backward runs (each "
                f"`times:` counted); at most {MAX_BACKWARD_RUNS:,} are allowed: give fewer "
                "backward items or smaller `times:`", where)
        if runs * steps_run > MAX_BACKWARD_WORK:
            raise SpecLimitError(
                f"with this {what} call the spec asks for {runs:,} backward runs through a "
                f"forward of {steps_run:,} steps, {runs * steps_run:,} steps' hooks in all; "
                f"at most {MAX_BACKWARD_WORK:,} are allowed: run backward fewer times or "
                "explain a smaller model", where)
        if runs * elements > MAX_BACKWARD_ELEMENTS:
            raise SpecLimitError(
                f"with this {what} call the spec asks for {runs:,} backward runs over tensors "
                f"of {elements:,} elements, {runs * elements:,} in all (each run's gradients "
                f"are recorded and checked anew); at most {MAX_BACKWARD_ELEMENTS:,} are "
                "allowed: run backward fewer times or make the tensors smaller", where)
        if runs * multiply_adds > MAX_BACKWARD_MULTIPLY_ADDS:
            raise SpecLimitError(
                f"with this {what} call the spec asks for {runs:,} backward runs through a "
                f"forward of {multiply_adds:,} multiply-adds, {runs * multiply_adds:,} in all; "
                f"at most {MAX_BACKWARD_MULTIPLY_ADDS:,} are allowed: run backward fewer times "
                "or make the layers or inputs smaller", where)
    return steps_run


def bound_rank_values(spec: ModelSpec) -> int:
    """The elements of the ranks' own input values (`distributed: inputs:`), which are held
    beside the declared inputs as an input is: refused past the bound on all the spec's tensors
    together, and returned for the checker's total of them to start from."""
    total = 0
    for rank, values in enumerate(spec.distributed.inputs if spec.distributed else ()):
        for name, init in values.values:
            total += numel(init.shape)
            if total > MAX_TOTAL_ELEMENTS:
                raise SpecLimitError(
                    f"with rank {rank}'s value of {name!r} ({show(init.shape)}), the ranks' "
                    f"own values hold {total:,} elements; the limit on all the spec's tensors "
                    f"together is {MAX_TOTAL_ELEMENTS:,} (hooks are explained on tiny models: "
                    "make the tensors smaller)", init.where)
    return total


class MultiplyAdds:
    """The multiply-adds of the forward as the checker meets them, a module's counted once (at
    its first call, with those argument shapes) and added again at each further call, so the
    count is of the forward expanded while the checking is not. `open` holds one running count
    per module body being checked; their sum is the forward's so far."""

    def __init__(self) -> None:
        self.open: list[int] = []
        self.per_call: dict[object, int] = {}
        self.forward = 0

    def enter(self) -> None:
        self.open.append(0)

    def leave(self, call: object, root: bool) -> None:
        count = self.open.pop()
        self.per_call[call] = count
        if self.open:
            self.open[-1] += count
        if root:
            self.forward = count

    def called_again(self, call: object, step: Step, column: int) -> None:
        self.add(self.per_call.get(call, 0), step, column)

    def add(self, count: int, step: Step, column: int) -> None:
        if not self.open or not count:
            return
        self.open[-1] += count
        total = sum(self.open)
        if total > MAX_MULTIPLY_ADDS:
            raise SpecLimitError(
                f"in step {quoted(step.text)}: the forward would do {_count(total)} "
                "multiply-adds by here (Linear, Conv2d, @ and matmul, every module call "
                f"counted); at most {MAX_MULTIPLY_ADDS:,} are allowed (hooks are explained on "
                "tiny models: make the layers or inputs smaller)", step.where.shifted(column))


def bound_intermediate(expr: Expr, shape: Shape, module_call: bool, step: Step,
                       total: int) -> int:
    """A tensor made inside a step (`x[:, None] * x[None, :]` in `sum(...)`) is as real as a
    named one: refuse it over the bound on one tensor, and add it to the total of all of them
    (returned). Views (indexing, .T, reshape) hold no memory of their own, and a module's
    result is counted inside the module, so neither adds to the total."""
    where = step.where.shifted(getattr(expr, "column", 0))
    count = numel(shape)
    if count > MAX_ELEMENTS:
        raise SpecLimitError(
            f"in step {quoted(step.text)}: a tensor made inside the step would have shape "
            f"{show(shape)}, {count:,} elements; the limit for every tensor is "
            f"{MAX_ELEMENTS:,} (make the inputs smaller)", where)
    if isinstance(expr, Index | Transpose) or module_call or (
            isinstance(expr, Call) and expr.func in _VIEWS):
        return total
    total += count
    if total > MAX_TOTAL_ELEMENTS:
        raise SpecLimitError(
            f"with a tensor of shape {show(shape)} made inside step {quoted(step.text, 40)}, "
            f"the spec's tensors hold {total:,} elements in all; the limit is "
            f"{MAX_TOTAL_ELEMENTS:,} (hooks are explained on tiny models: make the tensors "
            "smaller)", where)
    return total


class _StepCounter:
    """Steps run per call of each module, counted once per module (not per call)."""

    def __init__(self) -> None:
        self.per_call: dict[str, int] = {}
        self.heaviest: tuple[int, str] = (0, "")  # steps per call and path of the largest module

    def module(self, module: ModuleSpec) -> int:
        known = self.per_call.get(module.path)
        if known is not None:
            return known
        total = sum(self.step(module, step) for step in module.steps)
        self.per_call[module.path] = total
        self.heaviest = max(self.heaviest, (total, module.path))
        return total

    def step(self, module: ModuleSpec, step: Step) -> int:
        """One for the step itself, plus every step of every module it calls."""
        children = {child.name: child for child in module.modules}
        return 1 + sum(self.module(children[call.func])
                       for call in _calls(step.assignment.expr) if call.func in children)


def _calls(expr: Expr) -> list[Call]:
    if isinstance(expr, Call):
        found = [expr]
        for arg in expr.args:
            found += _calls(arg)
        for _, value in expr.kwargs:
            found += _calls(value)
        return found
    if isinstance(expr, BinOp):
        return _calls(expr.left) + _calls(expr.right)
    if isinstance(expr, Neg | Transpose | Index):
        return _calls(expr.operand)
    return []


def _too_many_steps(step: Step, cost: int, total: int, counter: _StepCounter) -> str:
    because = ""
    if cost > 1:
        steps, path = counter.heaviest
        because = (f" (the step {quoted(step.text, 40)} runs {_count(cost)} of them; module "
                   f"{path!r} runs {_count(steps)} at each call)")
    return (f"the forward runs {_count(total)} steps once every module call is expanded"
            f"{because}; at most {MAX_STEPS_RUN:,} are allowed: call modules fewer times each, "
            "or nest such calls less deeply")


def _count(number: int) -> str:
    return f"{number:,}" if number < 10**15 else "more than 10**15"
