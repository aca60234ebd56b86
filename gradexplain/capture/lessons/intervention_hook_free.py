"""What an intervention's change should be, from a third build with no hook that changes
anything: where each replaced gradient goes, the names of those places, the check, and the rule.

Backward is linear in the gradient, so a leaf's gradient with the hook must equal its gradient
without plus the vector-Jacobian product, from the replaced positions to the leaf, of the
replacement's change (replacement - original). That product comes from one
`torch.autograd.grad(outputs=<the replaced positions>, inputs=<leaves>, grad_outputs=<the
changes>)`: the module's positional arguments for a full hook, its outputs for a full pre-hook,
the tensor itself for a tensor hook, and for a legacy hook the `next_functions` edges of the
grad_fn of the module's first output (as GradientEdges). The rule says in words what changed and
why, from the same positions.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, cast

import torch
from torch import nn
from torch.autograd.graph import GradientEdge

from gradexplain.capture.build import build, observe
from gradexplain.capture.checks import RECOMPUTED, agreement
from gradexplain.capture.lessons.intervention_runs import (
    Goal,
    ReplacingHook,
    Run,
    lookup,
    namer,
    tensors_of,
)
from gradexplain.capture.values import tensor_value
from gradexplain.language.model import BackwardSpec, GradCall, Intervention, ModelSpec
from gradexplain.records.lessons.interventions import GradChange, Replacement
from gradexplain.records.numbers import fmt, fmt_shape

# Where a replaced gradient goes, in the hook-free build: a tensor, an autograd edge, or nowhere.
Position = torch.Tensor | GradientEdge | None


HOOK_CALLS = {
    "backward": "register_backward_hook",
    "full_backward": "register_full_backward_hook",
    "full_backward_pre": "register_full_backward_pre_hook",
    "tensor": "Tensor.register_hook",
}


class HookFree:
    """A third build with no hook that changes anything: where each replaced gradient goes, the
    names of those places, and the vector-Jacobian products that check the run with the hook."""

    def __init__(self, spec: ModelSpec, goal: Goal, item: Intervention,
                 hook: ReplacingHook) -> None:
        self.spec = spec
        self.item = item
        self.hook = hook
        self.built = build(spec)
        self.named: dict[str, torch.Tensor] = {}
        # Per forward call of the module: one position per hook argument entry.
        self.positions: list[list[Position]] = []
        self.finite = True
        self._forward(goal)
        aliases: dict[int, list[str]] = {}
        for name, tensor in [*self.named.items(), *self.built.leaves().items()]:
            aliases.setdefault(id(tensor), []).append(name)
        self.names_by_id = {key: canonical(names) for key, names in aliases.items()}

    def _forward(self, goal: Goal) -> None:
        item = self.item

        remember = namer(self.named)

        def before_call(module: nn.Module, args: tuple[Any, ...]) -> None:
            # A full hook's grad_input follows the positional arguments as the caller passed them.
            self.positions.append([arg if isinstance(arg, torch.Tensor) and arg.requires_grad
                                   else None for arg in args])

        def after_call(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            outputs = output if isinstance(output, tuple) else (output,)
            if item.hook == "full_backward_pre":
                self.positions.append([out if isinstance(out, torch.Tensor) and out.requires_grad
                                       else None for out in outputs])
                return
            first = tensors_of(output)[:1]
            node = first[0].grad_fn if first else None
            # The legacy hook's grad_input: one entry per edge of the first output's grad_fn.
            self.positions.append([] if node is None else [
                None if edge is None else GradientEdge(edge, number)
                for edge, number in node.next_functions])

        with ExitStack() as hooks:
            if item.hook != "tensor":
                module = self.built.model.get_submodule(item.target)
                if item.hook == "full_backward":
                    hooks.enter_context(module.register_forward_pre_hook(before_call))
                else:
                    hooks.enter_context(module.register_forward_hook(after_call))
            with observe(remember):
                self.returned = self.built.forward()
        if item.hook == "tensor":
            self.positions.append([lookup(item.target, self.named, self.built)])
        self.goal = goal

    # --- names ---------------------------------------------------------------------------------

    def position_name(self, position: Position) -> str:
        if position is None:
            return "nothing"
        if isinstance(position, torch.Tensor):
            return self.names_by_id.get(id(position), "an unnamed tensor")
        node, number = position.node, position.output_nr
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            return self.names_by_id.get(id(variable), node.name())
        for tensor in self.named.values():
            if tensor.grad_fn is node and tensor.output_nr == number:
                return self.names_by_id[id(tensor)]
        return str(node.name())

    def position_at(self, call: int, index: int) -> Position:
        if call - 1 >= len(self.positions):
            return None
        places = self.positions[call - 1]
        return places[index] if index < len(places) else None

    def replacements(self) -> list[Replacement]:
        rows = []
        for hook_call in self.hook.calls:
            count = max(len(hook_call.before), len(hook_call.after))
            for index in range(count):
                before = hook_call.before[index] if index < len(hook_call.before) else None
                after = hook_call.after[index] if index < len(hook_call.after) else None
                if index >= len(hook_call.before):
                    flows = "nothing (an extra entry)"
                else:
                    flows = self.position_name(self.position_at(hook_call.call, index))
                rows.append(Replacement(hook_call.call, self.argument_name(index), flows,
                                        tensor_value(before), tensor_value(after)))
        return rows

    def argument_name(self, index: int) -> str:
        argument = self.hook.argument
        return argument if argument == "grad" else f"{argument}[{index}]"

    def place_names(self) -> list[str]:
        """The names of the replaced positions, each once, in hook argument order."""
        names: list[str] = []
        for places in self.positions:
            for place in places:
                name = self.position_name(place)
                if place is not None and name not in names:
                    names.append(name)
        return names

    # --- the check -------------------------------------------------------------------------------

    def predicted_change(self) -> dict[str, torch.Tensor | None]:
        """Per leaf (or autograd.grad `wrt`): the vector-Jacobian product of the replacement's
        change, from the replaced positions; None where the graph does not reach it."""
        outputs: list[torch.Tensor | GradientEdge] = []
        deltas: list[torch.Tensor] = []
        for hook_call in self.hook.calls:
            for index, (before, after) in enumerate(zip(hook_call.before, hook_call.after,
                                                        strict=False)):
                position = self.position_at(hook_call.call, index)
                if position is None or before is None:
                    continue
                outputs.append(position)
                deltas.append(-before if after is None else after - before)
        # normalize divides by the gradients' sum; a sum of 0 gives inf or nan, which no
        # linear prediction can check.
        self.finite = all(bool(torch.isfinite(delta).all()) for delta in deltas)
        targets = self.check_targets()
        if not outputs or not targets:
            return dict.fromkeys(targets)
        # One hook kind gives one kind of position: all tensors, or (legacy) all edges.
        products = torch.autograd.grad(cast(Sequence[torch.Tensor], outputs),
                                       list(targets.values()), deltas, retain_graph=True,
                                       allow_unused=True)
        return dict(zip(targets, products, strict=True))

    def check_targets(self) -> dict[str, torch.Tensor]:
        goal = self.goal
        if isinstance(goal, BackwardSpec):
            return {name: leaf for name, leaf in self.built.leaves().items()
                    if leaf.requires_grad}
        targets: dict[str, torch.Tensor] = {}
        for name in goal.wrt:
            found = self.returned.get(name)
            if found is None:
                found = self.named.get(name)
            if found is None:
                found = self.built.leaves()[name]
            targets.setdefault(name, found)
        return targets

    def changes(self, without: Run, with_: Run) -> tuple[GradChange, ...]:
        rows: list[GradChange] = []
        # Named tensors that are leaves in both runs are shown once, as the leaf's `.grad`.
        leaf_ids = {id(leaf) for leaf in without.built.leaves().values()}
        leaf_ids |= {id(leaf) for leaf in with_.built.leaves().values()}
        # Names of one tensor in both runs share a row; a full hook's wrapped copy of a module
        # argument is a tensor of its own (`model.x1` inside, `x1` outside).
        groups: dict[tuple[int | None, int | None], list[str]] = {}
        for name in dict.fromkeys([*without.named, *with_.named]):
            tensors = [run.named.get(name) for run in (without, with_)]
            if all(tensor is None or id(tensor) in leaf_ids for tensor in tensors):
                continue
            if not any(tensor is not None and tensor.requires_grad for tensor in tensors):
                continue
            key = (None if tensors[0] is None else id(tensors[0]),
                   None if tensors[1] is None else id(tensors[1]))
            groups.setdefault(key, []).append(name)
        for names in groups.values():
            name = canonical(names)
            before, after = without.tensor_grads.get(name), with_.tensor_grads.get(name)
            if before is None and after is None:
                continue  # off the differentiated path in both runs: nothing to compare
            rows.append(GradChange(name, "tensor", tensor_value(before), tensor_value(after),
                                   _changed(before, after),
                                   aliases=tuple(alias for alias in names if alias != name)))
        predicted = self.predicted_change()
        for name, before in without.finals.items():
            after = with_.finals.get(name)
            product = predicted.get(name)
            wrapped = name in with_.wrapped or name in without.wrapped
            checked = not wrapped and not self.hooked_result(name) and self.finite
            verified, error = _check(before, after, product) if checked else (None, None)
            rows.append(GradChange(name, with_.final_kind, tensor_value(before),
                                   tensor_value(after), _changed(before, after),
                                   downstream=None if wrapped else product is not None,
                                   verified=verified, max_abs_err=error))
        return tuple(rows)

    # --- the words -------------------------------------------------------------------------------

    def target_label(self) -> str:
        return self.item.target or "the top-level model"

    def where_sentence(self) -> str:
        """Where the hook's replacement goes, from the positions of this build."""
        item, target = self.item, self.target_label()
        places = ", ".join(self.place_names()) or "nothing"
        if item.hook == "full_backward":
            return (f"register_full_backward_hook on {target} replaces grad_input, the gradients "
                    f"{target} passes back to its positional inputs ({places}): they flow only "
                    f"into what those inputs were computed from")
        if item.hook == "full_backward_pre":
            return (f"register_full_backward_pre_hook on {target} replaces grad_output, the "
                    f"gradients arriving at {target}'s outputs ({places}): all of {target}'s "
                    f"backward, and everything before it, starts from them")
        if item.hook == "backward":
            node = self.hook.node_name or "its first output's grad_fn"
            return (f"register_backward_hook on {target} replaces the grad_inputs of {node}, the "
                    f"grad_fn of {target}'s first output and so the last op of its forward; they "
                    f"flow along that node's next_functions edges ({places}), so the rest of "
                    f"{target}'s backward, and everything before it, starts from them")
        tensor = self.positions[0][0] if self.positions and self.positions[0] else None
        if tensor is not None and isinstance(tensor, torch.Tensor) and tensor.is_leaf:
            return (f"Tensor.register_hook on the leaf {target} replaces the gradient that "
                    f"accumulates into {target}.grad, and nothing else")
        return (f"Tensor.register_hook on {target} replaces {target}'s gradient: everything "
                f"{target} was computed from gets its gradient through it")

    def hooked_result(self, name: str) -> bool:
        """Whether `name` is an autograd.grad result for the tensor a tensor hook is on.

        torch applies a tensor hook to autograd.grad's result for that very tensor only when the
        backward need not go past it (`grad(z, [y])`: replaced; `grad(z, [y, x])`: not), so
        the linear prediction does not say which one the caller gets: left unchecked.
        """
        return (self.item.hook == "tensor" and name == self.item.target
                and isinstance(self.goal, GradCall))

    def inside(self, name: str) -> bool:
        """Whether a tensor is computed inside the hooked module (its parameters included)."""
        if self.item.hook == "tensor":
            return False
        return self.parameter(name) or (self.item.target == "" and "." in name) or (
            name.startswith(self.item.target + ".") and self.item.target != "")

    def parameter(self, name: str) -> bool:
        """Whether a leaf is a parameter of the hooked module (or of a module below it)."""
        if self.item.hook == "tensor":
            return False
        module = self.built.model.get_submodule(self.item.target)
        prefix = f"{self.item.target}." if self.item.target else ""
        return name in {prefix + key for key, _ in module.named_parameters()}

    def rule(self, changes: Sequence[GradChange]) -> str:
        """The rule in plain words, derived from what changed and where the graph reaches."""
        item, target = self.item, self.target_label()
        if not self.hook.calls:
            return (f"The {HOOK_CALLS[item.hook]} hook on {target} never fired in this backward "
                    "(no gradient passed where it sits), so nothing was replaced and every "
                    "gradient is as without it.")
        finals = [change for change in changes if change.kind != "tensor"]
        sentences = [self.where_sentence() + "."]
        changed = [change.name for change in finals if change.changed]
        if changed:
            sentence = (f"Changed: {_grads(changed, finals)}, computed downstream of the "
                        "replaced gradients")
            own = [name for name in changed if self.parameter(name)]
            if own and item.hook == "backward":
                sentence += (f"; {_belongs(own, target, 'yet')}: the legacy hook sits on "
                             f"{target}'s last node, so the rest of {target}'s backward runs "
                             "after the replacement")
            elif own and item.hook == "full_backward_pre":
                sentence += (f"; {_belongs(own, target, 'and')}: the pre-hook replaces "
                             f"{target}'s grad_output before any of its backward runs")
            sentences.append(sentence + ".")
        same = [change for change in finals if not change.changed]
        inside = [change.name for change in same
                  if change.downstream is False and self.inside(change.name)]
        apart = [change.name for change in same
                 if change.downstream is False and not self.inside(change.name)]
        zero = [change.name for change in same
                if change.downstream and not self.hooked_result(change.name)]
        wrapped = [change.name for change in same if change.downstream is None]
        if inside:
            sentence = (f"Unchanged: {_grads(inside, finals)}, computed inside {target}, below "
                        "nothing the hook replaced")
            if item.hook == "full_backward" and any(self.parameter(name) for name in inside):
                sentence += " (a full backward hook never reaches its own module's parameters)"
            sentences.append(sentence + ".")
        if apart:
            sentences.append(f"Unchanged: {_grads(apart, finals)}, not computed from the "
                             "replaced gradients (no path from them leads there).")
        if zero:
            sentences.append(f"Unchanged although downstream of the replaced gradients: "
                             f"{_grads(zero, finals)}; the replacement's change is zero along "
                             "every path there.")
        if wrapped:
            sentences.append(f"Not compared with the replacement: {_grads(wrapped, finals)}, "
                             f"the full hook's wrapped copy inside {target}, whose gradient is "
                             "taken before the hook replaces it.")
        if not self.finite:
            sentences.append("Not checked: the replacement is not finite (inf or nan, as when "
                             "normalize divides by gradients that sum to 0).")
        if any(self.hooked_result(change.name) for change in finals):
            sentences.append(f"Not checked: the autograd.grad result for {target} itself; torch "
                             "applies a tensor hook to it only when the backward need not go "
                             f"past {target}.")
        return " ".join(sentences)

    def error_rule(self) -> str | None:
        """The rule a `wrong_length` or `wrong_shape` replacement broke."""
        item, target = self.item, self.target_label()
        first = self.hook.calls[0] if self.hook.calls else None
        if item.action == "wrong_length" and first is not None:
            count = len(first.before)
            places = self.positions[first.call - 1] if first.call - 1 < len(self.positions) else []
            names = [self.position_name(places[index]) if index < len(places) else "nothing"
                     for index in range(count)]
            if item.hook == "full_backward":
                names = self.argument_names(count)
            expected = ", ".join("None" if name == "nothing" else f"g_{_short(name)}"
                                 for name in names)
            shape = f"({expected},)" if count == 1 else f"({expected})"
            got = f"{fmt(count)} value{'s' if count != 1 else ''}, not {fmt(count + 1)}"
            if item.hook == "full_backward":
                return (f"a full backward hook returns one gradient per positional input of "
                        f"{target}: {shape} here, {got}")
            if item.hook == "full_backward_pre":
                return (f"a full backward pre-hook returns one gradient per output of {target}: "
                        f"{shape} here, {got}")
            node = self.hook.node_name or "the node it sits on"
            return (f"a legacy backward hook returns one gradient per next_functions edge of "
                    f"{node}, the node it sits on: {shape} here, {got}")
        if item.action == "wrong_shape" and first is not None:
            index = next((number for number, grad in enumerate(first.before) if grad is not None),
                         0)
            before, after = first.before[index], first.after[index]
            if before is not None and after is not None:
                return (f"each replacement must have the shape of what it replaces: "
                        f"{self.argument_name(index)} has shape {fmt_shape(tuple(before.shape))}, "
                        f"the hook returned shape {fmt_shape(tuple(after.shape))}")
        return None

    def argument_names(self, count: int) -> list[str]:
        """The hooked module's positional argument names (`x1`, `x2`), for `(g_x1, g_x2)`."""
        for module in self.spec.root.all_modules():
            if module.path == self.item.target:
                names = list(module.args)
                break
        else:
            layer = self.built.model.get_submodule(self.item.target)
            parameters = list(inspect.signature(type(layer).forward).parameters)[1:]
            names = [name for name in parameters if not name.startswith("*")]
        names += [f"input{index}" for index in range(len(names), count)]
        return names[:count]


def _changed(before: torch.Tensor | None, after: torch.Tensor | None) -> bool:
    """Whether the hook changed a gradient: more than rounding, so by as much as a check would
    fail on (a full hook adds identity nodes, which may reorder sums)."""
    if before is None or after is None:
        return (before is None) != (after is None)
    return not agreement(after, before, RECOMPUTED)[0]


def _check(before: torch.Tensor | None, after: torch.Tensor | None,
           product: torch.Tensor | None) -> tuple[bool, float]:
    """Whether `after` == `before` + `product` (None counting as no gradient), and the error."""
    if product is None:
        expected = before
    elif before is None:
        expected = product
    else:
        expected = before + product
    if expected is None or after is None:
        return (expected is None) == (after is None), 0.0 if expected is after else math.inf
    terms = [term for term in (before, product) if term is not None]
    return agreement(after, expected, RECOMPUTED, *terms)


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _grads(names: Sequence[str], changes: Sequence[GradChange]) -> str:
    """`x1.grad and x2.grad`, or `the autograd.grad result for x` for results."""
    kinds = {change.name: change.kind for change in changes}
    shown = [f"{name}.grad" if kinds.get(name) == "leaf" else f"the autograd.grad result for {name}"
             for name in names]
    if len(shown) <= 1:
        return "".join(shown)
    return ", ".join(shown[:-1]) + " and " + shown[-1]


def _belongs(names: Sequence[str], target: str, joint: str) -> str:
    """`module2.l.weight is a parameter of module2, yet its gradient changed`."""
    if len(names) == 1:
        return f"{names[0]} is a parameter of {target}, {joint} its gradient changed"
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    return f"{listed} are parameters of {target}, {joint} their gradients changed"


def canonical(names: Sequence[str]) -> str:
    """A tensor's canonical name: its top-level name if it has one, else its first name."""
    return next((name for name in names if "." not in name), names[0])


__all__ = ["HookFree", "Position", "canonical"]
