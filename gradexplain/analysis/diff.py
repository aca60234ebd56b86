"""Legacy vs full: each module's legacy backward hook call beside its full one, argument by
argument, with the reason for every difference and a verdict in plain words. No torch here.

Calls are paired structurally: a legacy call serves the module call whose last node it sits
on, a full call the module call whose wrappers it sits on (LabelledEvent.call), so a module
called twice, or a backward run twice, pairs each call with its own. The reasons come from the
labels (which derivative each argument is) and the trace (the module's arguments, the node the
legacy hook sits on, the step that made the module's first output), never from values.
What it finds is records (records/diff.py), for render/ to show.
"""

from __future__ import annotations

from collections.abc import Iterable

from gradexplain.analysis.verdict import align, verdict
from gradexplain.errors import first_line_of
from gradexplain.records.diff import ArgRow, CallDiff, Finding, HookDiff, ModuleDiff, unique
from gradexplain.records.graph import GraphView
from gradexplain.records.names import canonical_name
from gradexplain.records.paths import module_title
from gradexplain.records.refusals import refusal_text
from gradexplain.records.session import Session
from gradexplain.records.trace import Mode, ModuleCall, PassTrace, TensorRecord, UserHook
from gradexplain.records.walk import LabelledArg, LabelledEvent, Meaning, PassFailure, PassWalk


def compare(session: Session) -> HookDiff:
    """Every module's legacy and full backward hook calls, aligned and explained."""
    walk = session.walk
    legacy_pass = next(item for item in walk.passes if item.mode == "legacy")
    full_pass = next(item for item in walk.passes if item.mode == "full")
    legacy, full = session.trace("legacy"), session.trace("full")
    assert legacy is not None and full is not None
    legacy_calls = _hook_calls(legacy_pass, "backward")
    full_calls = _hook_calls(full_pass, "full_backward")
    modules = []
    view = GraphView(legacy)
    for module in _modules(legacy):
        comparer = _Module(session, module, legacy, full, view)
        modules.append(comparer.diff(legacy_calls.get(module, {}), full_calls.get(module, {})))
    return HookDiff(walk.spec, walk.name, walk.torch, tuple(modules), full_pass.graph_changed)


Calls = dict[tuple[int, int], LabelledEvent]


def _hook_calls(walk_pass: PassWalk, hook: str) -> dict[str, Calls]:
    """Each module's calls of gradexplain's own `hook` in the pass, by (run, call), the first
    of each: one sweep of the events for every module (a sweep per module took 4 s of a
    300-layer model's text)."""
    found: dict[str, Calls] = {}
    for event in walk_pass.events:
        # gradexplain's own hook of the pass; the user's own (`user`) may sit beside it
        if event.hook == hook and event.call is not None and event.user is None:
            found.setdefault(event.target, {}).setdefault((event.run, event.call), event)
    return found


def _modules(trace: PassTrace) -> list[str]:
    """Module paths in the order their forward started (parents before children)."""
    order: list[str] = []
    for event in trace.events:
        if event.hook == "forward_pre" and event.target not in order:
            order.append(event.target)
    return order


class _Module:
    """One module: its calls in both traces, and the words to explain them."""

    def __init__(self, session: Session, module: str, legacy: PassTrace,
                 full: PassTrace, view: GraphView) -> None:
        self.session = session
        self.view = view  # the legacy pass's graph, which names what the trace left unnamed
        self.naming = session.walk.naming
        self.module = module
        self.legacy = legacy
        self.full = full
        self.calls = [index for index, call in enumerate(legacy.calls) if call.module == module]
        first = legacy.calls[self.calls[0]] if self.calls else None
        self.first = first
        self.arguments = tuple(self.argument_name(first, i)
                               for i in range(len(first.arguments or first.inputs))
                               ) if first else ()
        node = self.graph_name(legacy, first.legacy_node) if first else None
        self.last_node = node
        self.made = self.legacy_made(first) if first else None
        self.step = self.step_text(self.made)
        # Why the full pass has no full hooks on this module, if torch refuses them.
        self.refusals = [item for item in full.refusals if item.module == module]

    # --- names -------------------------------------------------------------------------------

    def record(self, trace: PassTrace, index: int | None) -> TensorRecord | None:
        return None if index is None or index >= len(trace.tensors) else trace.tensors[index]

    def record_name(self, trace: PassTrace, index: int | None) -> str | None:
        record = self.record(trace, index)
        return None if record is None else canonical_name(record.names)

    def argument_name(self, call: ModuleCall, index: int) -> str | None:
        tensors = call.arguments or call.inputs
        return self.record_name(self.legacy, tensors[index]) or self.graph_tensor_name(
            tensors[index])

    def legacy_made(self, call: ModuleCall) -> str | None:
        """The name of the output a legacy hook sits on the grad_fn of: torch's item [0] until
        a tensor (`legacy_output`; a session saved before it was recorded: output 0)."""
        index = call.legacy_output if call.legacy_output is not None else (
            call.outputs[0] if call.outputs else None)
        return self.record_name(self.legacy, index) or self.graph_tensor_name(index)

    def first_output_words(self, call: ModuleCall) -> str:
        """`first output z`, or for a nested result, dict or list `first tensor z (torch
        takes item [0] ...)`: the tensor a legacy hook sits on the grad_fn of."""
        made = self.legacy_made(call)
        named = f" {self.naming.short(made)}" if made else ""
        nested = call.legacy_output is not None and (
            not call.outputs or call.outputs[0] != call.legacy_output)
        return (f"first tensor{named} (torch takes item [0] of the result, or a dict's first "
                "tensor value, until it finds a tensor)" if nested else f"first output{named}")

    def graph_tensor_name(self, index: int | None) -> str | None:
        """The name labels give a tensor of the legacy pass: its own, or for one the model
        made without a name (`self.s * 2` in a Python model's own forward) the name its place
        in the graph gets (`output:mul`); None for no tensor, or one outside the graph."""
        position = self.view.raw_position(index)
        if position is None or position not in self.view.positions:
            return None  # no gradient reaches it (an output the caller never used)
        return self.view.tensor_name(position)

    def tensor_names(self, index: int | None) -> set[str]:
        """Every name a tensor of the legacy pass goes by."""
        record = self.record(self.legacy, index)
        names = set(record.names) if record else set()
        graph_name = self.graph_tensor_name(index)
        return names if graph_name is None else names | {graph_name}

    def argument_names(self, call: ModuleCall, index: int) -> set[str]:
        """Every name the module's `index`-th argument goes by (the caller's and its own)."""
        names: set[str] = set()
        for tensors in (call.arguments, call.inputs):
            names |= self.tensor_names(tensors[index] if index < len(tensors) else None)
        return names

    def graph_name(self, trace: PassTrace, node: str | None) -> str | None:
        for item in trace.graph:
            if item.id == node:
                return item.name.removeprefix("torch::autograd::")
        return None

    def step_text(self, made: str | None) -> str | None:
        if made is None:
            return None
        record = self.legacy.named(made)
        names = set(record.names) if record else {made}
        for step in self.session.forward:
            if names & set(step.targets):
                return step.text
        return None

    def is_leaf(self, name: str) -> bool:
        record = self.legacy.named(name)
        return record is not None and record.is_leaf

    # --- the comparison ---------------------------------------------------------------------

    def diff(self, legacy_calls: Calls, full_calls: Calls) -> ModuleDiff:
        """The module's legacy and full hook calls (`_hook_calls`), aligned and explained."""
        keys = sorted(set(legacy_calls) | set(full_calls) | self.expected_keys())
        calls = tuple(self.call(run, call, legacy_calls.get((run, call)),
                                full_calls.get((run, call))) for run, call in keys)
        return ModuleDiff(self.module, self.arguments, self.last_node, self.made, self.step,
                          calls, self.followable(verdict(self, calls)))

    def followable(self, said: str) -> str:
        """The verdict, with what its advice to register a full hook needs first where the
        model has its own legacy hook on the module (torch refuses both kinds on one)."""
        own = [hook.function for mode, hook in self.own_hooks()
               if hook.hook == "backward" and hook.ran and mode == "legacy"]
        if "use register_full_backward_hook" not in said or not own:
            return said
        return (f"{said} (after removing your own legacy hook {own[0]} from "
                f"{module_title(self.module)}: torch refuses legacy and full backward hooks on "
                "one module)")

    def expected_keys(self) -> set[tuple[int, int]]:
        """Every (backward run, call) pair: a hook that never fires still gets its row."""
        return {(run.index, call) for run in self.legacy.runs if run.kind == "backward"
                for call in self.calls}

    def call(self, run: int, call: int, legacy: LabelledEvent | None,
             full: LabelledEvent | None) -> CallDiff:
        module_call = self.legacy.calls[call]
        rows = tuple(self.rows(module_call, legacy, full))
        findings: list[Finding] = []
        if legacy is None or full is None:
            findings += self.silent(module_call, legacy, full, run)
        if legacy is not None:
            findings += self.legacy_findings(module_call, legacy, full)
        if full is not None:
            findings += self.full_findings(module_call, full)
        findings += self.user_hook_findings()
        return CallDiff(run, call, self.calls.index(call) + 1,
                        legacy.seq if legacy else None, full.seq if full else None, rows,
                        tuple(unique(findings)))

    def rows(self, call: ModuleCall, legacy: LabelledEvent | None,
             full: LabelledEvent | None) -> list[ArgRow]:
        """One row per argument name; `=` is the alignment's (analysis/verdict.py), the fact
        the verdict reads too."""
        legacy_args = {arg.name: arg for arg in legacy.args} if legacy else {}
        full_args = {arg.name: arg for arg in full.args} if full else {}
        names = _ordered(list(legacy_args) + list(full_args))
        alignments = {kind: align([legacy_args.get(name) for name in names
                                   if name.startswith(kind + "[")],
                                  [full_args.get(name) for name in names
                                   if name.startswith(kind + "[")])
                      for kind in ("grad_input", "grad_output")}
        rows = []
        for name in names:
            kind, position = _position(name)
            alignment = alignments[kind]
            left, right = legacy_args.get(name), full_args.get(name)
            same = alignment.same_at(position)
            note = "" if same else (self.row_note(call, name, left, right, legacy, full)
                                    + alignment.elsewhere(kind, position))
            rows.append(ArgRow(name, left, right, same, note))
        return rows

    def row_note(self, call: ModuleCall, name: str, legacy: LabelledArg | None,
                 full: LabelledArg | None, legacy_event: LabelledEvent | None,
                 full_event: LabelledEvent | None) -> str:
        sides = []
        if legacy_event is None:
            sides.append("legacy did not fire")
        else:
            sides.append("legacy: " + (self.role(call, legacy, self.pinned_argument(
                legacy, full_event)) if legacy else "no such entry"))
        if full_event is None:
            sides.append("full did not fire")
        else:
            own = _position(name)[1] if name.startswith("grad_input") else None
            sides.append("full: " + (self.role(call, full, own) if full else "no such entry"))
        return "; ".join(sides)

    def role(self, call: ModuleCall, arg: LabelledArg, argument: int | None = None) -> str:
        """What a hook argument is, in the module's terms; `argument`: the module argument it
        is known to be the gradient of (full's grad_input[j], or what is pinned to it)."""
        if arg.value is None:
            return "None"
        meaning = arg.meaning
        if meaning is None:
            return "not labelled"
        short = self.naming.short(meaning.wrt)
        layout = {"as-is": "", "transposed": ", transposed", "reshaped": ", reshaped",
                  "summed": ", before the broadcast sum"}[meaning.layout]
        part = f", only the part via {meaning.partial}" if meaning.partial else ""
        if argument is not None and argument < len(call.arguments or call.inputs):
            named = self.argument_name(call, argument) or meaning.wrt
            return (f"{module_title(self.module)}'s argument {argument} "
                    f"({self.naming.short(named)}){part}")
        position = self.argument_index(call, meaning)
        keyword = self.keyword_of(call, meaning)
        if position is not None and self.is_output(call, meaning):
            # The argument itself is the output: returned as it came (Identity, Dropout(0)),
            # or changed in place (ReLU(inplace=True)).
            # A leaf that requires grad cannot be changed in place (torch refuses): returned.
            how = ("returned as it got it" if call.returns_argument == position
                   or self.is_leaf(meaning.wrt) else "changed in place")
            what = (f"{module_title(self.module)}'s output {short} (its argument {position}, "
                    f"{how})")
        elif position is not None:
            what = f"{module_title(self.module)}'s argument {position} ({short})"
        elif keyword is not None:
            what = f"{module_title(self.module)}'s keyword argument {keyword} ({short})"
        elif self.is_output(call, meaning):
            what = f"{module_title(self.module)}'s output {short}"
        elif self.is_leaf(meaning.wrt):
            what = f"{self.leaf_kind(meaning.wrt)} {short}"
        else:
            where = (f"inside {module_title(self.module)}" if self.made_inside(meaning.wrt)
                     else f"not one of {module_title(self.module)}'s tensor arguments")
            what = f"{self.tensor_words(meaning.wrt)}, {where}"
        return f"{what}{layout}{part}"

    def made_inside(self, name: str) -> bool:
        """Whether a tensor's name says this module's forward (or a submodule's) made it: a
        spec step's `module2.t`, a Python module output's `m.inner:addmm`. A name the graph
        made up (`output:sin`, after what reads it) says nothing of where it was made."""
        if not self.module:
            return True  # everything the model computes is inside the model
        if self.legacy.named(name) is None:
            return False  # a name the graph made up
        owner = name.partition(":")[0] if ":" in name else name.rpartition(".")[0]
        return owner == self.module or owner.startswith(f"{self.module}.")

    def leaf_kind(self, name: str) -> str:
        return "input" if name in self.session.inputs else "parameter"

    def argument_index(self, call: ModuleCall, meaning: Meaning,
                       prefer: int | None = None) -> int | None:
        """Which of the module's arguments the tensor a label names is; `prefer` where it is
        several (`m(x, x)`: grad_input[1] is the share of argument 1)."""
        names = {meaning.wrt, *meaning.aliases}
        found = [index for index in range(len(call.arguments or call.inputs))
                 if names & self.argument_names(call, index)]
        return prefer if prefer in found else next(iter(found), None)

    def during_backward(self, call: ModuleCall) -> int | None:
        """The call's number among this module's calls (1 first), where it ran while a
        backward ran (its forward hook's event is in the backward phase); else None."""
        numbers = [position for position, index in enumerate(self.calls, start=1)
                   if self.legacy.calls[index] is call]
        forwards = [event for event in self.legacy.events
                    if event.hook == "forward" and event.target == self.module]
        if not numbers or numbers[0] > len(forwards):
            return None
        return numbers[0] if forwards[numbers[0] - 1].phase == "backward" else None

    def user_hook_findings(self) -> Iterable[Finding]:
        """The model's own backward hooks on this module that one pass leaves out (torch
        refuses legacy and full backward hooks on one module): what they change is changed in
        the other pass only, and that pass's kind of hook cannot be added beside them."""
        for mode, hook in self.own_hooks():
            if hook.ran:
                continue
            kind = "legacy" if hook.hook == "backward" else "full"
            yield Finding("user_hook", f"your {kind} backward hook {hook.function} on "
                          f"{module_title(self.module)} runs in the {kind} pass only, and "
                          f"a value it changes differs from the {mode} pass's: "
                          "torch refuses legacy and full backward hooks on one module, so "
                          f"register_{'full_' if kind == 'legacy' else ''}backward_hook "
                          f"cannot be added to {module_title(self.module)} beside it")

    def own_hooks(self) -> list[tuple[Mode, UserHook]]:
        """The model's own hooks on this module, each with the pass that recorded it."""
        return [(walk_pass.mode, hook) for walk_pass in self.session.walk.passes
                for hook in walk_pass.user_hooks
                if hook.scope == "module" and hook.target == self.module]

    def made_after(self, call: ModuleCall) -> tuple[str, str] | None:
        """The op that made another output of the call after the node a legacy hook sits on,
        and that output's name (an RNN makes its output, then h_n): None where that node is
        the latest of the outputs' (or the order is not known)."""
        made = {node.id: node for node in self.legacy.graph}
        legacy = made.get(call.legacy_node or "")
        if legacy is None or legacy.made is None:
            return None
        latest: tuple[int, str, str] | None = None  # when made, by what, which output
        for index in call.outputs:
            record = self.record(self.legacy, index)
            node = made.get(record.node or "") if record is not None else None
            if node is None or node.made is None or node.made <= legacy.made:
                continue
            if latest is None or node.made > latest[0]:
                latest = (node.made, node.name.removeprefix("torch::autograd::"),
                          self.record_name(self.legacy, index) or "?")
        return None if latest is None else (latest[1], latest[2])

    def pinned_argument(self, arg: LabelledArg, full: LabelledEvent | None) -> int | None:
        """The argument whose gradient full's hook got as the very chain-rule step legacy's
        `arg` is (pinned to it from the graph), where the labels name the value otherwise: a
        Flatten's grad_input named after its own output, reshaped, is its argument's."""
        if arg.pin is None or full is None:
            return None
        return next((_position(other.name)[1] for other in full.args
                     if other.name.startswith("grad_input") and other.pin == arg.pin), None)

    def keyword_of(self, call: ModuleCall, meaning: Meaning) -> str | None:
        """The keyword the tensor a label names was passed to the module by, if it was."""
        names = {meaning.wrt, *meaning.aliases}
        return next((keyword for keyword, index in call.keywords
                     if names & self.tensor_names(index)), None)

    def is_output(self, call: ModuleCall, meaning: Meaning) -> bool:
        names = {meaning.wrt, *meaning.aliases}
        return any(names & set(record.names) for record in
                   (self.record(self.legacy, index) for index in call.outputs) if record)

    # --- findings ---------------------------------------------------------------------------

    def legacy_findings(self, call: ModuleCall, event: LabelledEvent,
                        full: LabelledEvent | None = None) -> Iterable[Finding]:
        module = module_title(self.module)
        node = event.node.removeprefix("torch::autograd::") if event.node else "?"
        made = self.legacy_made(call)
        step = self.own_step(self.step_text(made))
        computes = f" (`{step}`)" if step else ""
        first = self.first_output_words(call)
        if call.returns_argument is not None:
            yield Finding("attach", f"legacy sits on {node}, the grad_fn of {module}'s {first}, "
                          f"which is its argument {call.returns_argument} returned as it got "
                          f"it: an op made before {module} ran, not one of its own; its "
                          "grad_input follows that op's operands")
        else:
            later = self.made_after(call)
            if later is not None:
                which = (f"not the last op of its forward ({later[0]}, which made its output "
                         f"{self.naming.short(later[1])}, came after)")
            elif any(index is None for index in call.outputs):
                # Tensors inside a nested result are not recorded as outputs: what made them,
                # and when, is not known here (an LSTM's (h_n, c_n) came after its output).
                which = "the op that made it"
            else:
                which = "the last op of its forward"
            yield Finding("attach", f"legacy sits on {node}, the grad_fn of {module}'s {first}: "
                          f"{which}{computes}; its grad_input follows that op's operands")
        inputs = [arg for arg in event.args if arg.name.startswith("grad_input")]
        seen: set[int] = set()
        for position, arg in enumerate(inputs):
            if arg.value is None:
                reason = self.none_reason(call, position, node)
                yield Finding("none", f"legacy {arg.name} is None: {reason}")
                continue
            meaning = arg.meaning
            if meaning is None:
                continue
            # Full's grad_input[j] is argument j's gradient: a legacy entry pinned to the same
            # chain-rule step is that argument's, whatever the labels name it by (`m(x, x)`
            # gives two arguments one name; a Flatten's grad_input is named after its output).
            pinned_to = self.pinned_argument(arg, full)
            pinned = pinned_to is not None
            index = pinned_to if pinned else self.argument_index(call, meaning, prefer=position)
            if meaning.partial:
                yield Finding("partial", f"legacy {arg.name} is {meaning.text}: the tensor is "
                              f"used more than once and {node} sees only its own share")
            if index is None:
                yield Finding("extra", self.extra_text(call, arg, meaning, node))
                continue
            again = index in seen  # another operand's share of the same argument (x * x)
            seen.add(index)
            if meaning.layout != "as-is" and not pinned:
                yield Finding("layout", f"legacy {arg.name} is {meaning.text}: "
                              f"{module}'s argument {index} in the shape {node} saw, "
                              "not its own")
            if index != position and not again:
                yield Finding("order", f"legacy {arg.name} is argument {index} "
                              f"({self.naming.short(meaning.wrt)}): the order follows the "
                              f"operands of {node}{computes}, not {module}'s arguments")
        for index in range(len(call.arguments or call.inputs)):
            name = self.argument_name(call, index)
            record = self.record(self.legacy, (call.arguments or call.inputs)[index])
            if (index in seen or name is None or record is None or not record.requires_grad
                    or self.no_gradient(full, index)):
                continue
            yield Finding("unseen", f"legacy grad_input lacks the gradient of {module}'s "
                          f"argument {index} ({self.naming.short(name)})")
        outputs = [index for index in call.outputs if index is not None]
        legacy_outputs = [arg for arg in event.args if arg.name.startswith("grad_output")]
        if len(outputs) > len(legacy_outputs):
            yield Finding("outputs", f"legacy grad_output has only what {node} made: "
                          f"{len(legacy_outputs)} of {module}'s {len(outputs)} outputs")

    def none_reason(self, call: ModuleCall, position: int, node: str) -> str:
        """A None edge is an operand without gradient, or one this run does not need."""
        for item in self.legacy.graph:
            if item.id == call.legacy_node and position < len(item.next):
                if item.next[position][0] is None:
                    return (f"operand {position} of {node} is a number or a tensor that does "
                            "not require grad")
                return (f"this run does not need operand {position} of {node} "
                        "(autograd.grad computes only what its inputs need)")
        return f"operand {position} of {node} has no gradient"

    def extra_text(self, call: ModuleCall, arg: LabelledArg, meaning: Meaning,
                   node: str) -> str:
        short = self.naming.short(meaning.wrt)
        module = module_title(self.module)
        if self.is_output(call, meaning):
            return (f"legacy {arg.name} is {meaning.text}: the gradient of {module}'s own "
                    f"output {short}, as {node} saw it, not of an input")
        keyword = self.keyword_of(call, meaning)
        if keyword is not None:
            return (f"legacy {arg.name} is {meaning.text}: the gradient of {module}'s keyword "
                    f"argument {keyword} ({short}), an operand of {node} (full hooks give "
                    "grad_input for positional arguments only)")
        if meaning.layout == "transposed":
            return (f"legacy {arg.name} is {meaning.text}: the gradient of {short}, transposed, "
                    f"as {node} used it (full hooks never give parameter gradients)")
        if self.is_leaf(meaning.wrt):
            kind = self.leaf_kind(meaning.wrt)
            after = (" (full hooks never give parameter gradients)" if kind == "parameter"
                     else "")
            return (f"legacy {arg.name} is {meaning.text}: the gradient of {kind} {short}, "
                    f"an operand of {node}{after}")
        return (f"legacy {arg.name} is {meaning.text}: {self.tensor_words(meaning.wrt)} is an "
                f"input of {node}, not one of {module}'s tensor arguments")

    def tensor_words(self, name: str) -> str:
        """`t`, or `t (module2.t)` when the tensor belongs to another module than this one."""
        short = self.naming.short(name)
        owner = name.rpartition(".")[0] if "." in name and ":" not in name else ""
        return short if owner == self.module or short == name else f"{short} ({name})"

    def own_step(self, text: str | None) -> str | None:
        """The step text, if this module's own forward wrote it (a built-in layer has none)."""
        if text is None:
            return None
        for step in self.session.forward:
            if step.text == text and step.module == self.module:
                return text
        return None

    def full_findings(self, call: ModuleCall, event: LabelledEvent) -> Iterable[Finding]:
        for arg in event.args:
            index = _position(arg.name)[1]
            if arg.name.startswith("grad_input"):
                if arg.value is None:
                    tensor = index < len(call.inputs) and call.inputs[index] is not None
                    why = ("no input of the module requires grad" if tensor
                           else f"argument {index} is not a tensor")
                    yield Finding("none", f"full {arg.name} is None: {why}")
                elif self.needs_no_grad(call, index):
                    name = self.argument_name(call, index) or f"argument {index}"
                    yield Finding("zeros", f"full {arg.name} is zeros, not None: "
                                  f"{self.naming.short(name)} does not require grad, but another "
                                  "input does")
            elif arg.value is None and index < len(call.outputs) and call.outputs[index] is None:
                # torch wraps only the tensors at the top level of the output (nn.LSTM's (h, c))
                yield Finding("none", f"full {arg.name} is None: output {index} is not a "
                              "tensor, and full hooks see only the tensors at the top level of "
                              "a module's output, so it is None in every backward")
            elif arg.value is None:
                output = self.record(self.legacy, call.outputs[index]
                                     if index < len(call.outputs) else None)
                why = ("does not require grad, so it is None in every backward"
                       if output is not None and not output.requires_grad
                       else "got no gradient in this backward")
                yield Finding("none", f"full {arg.name} is None: output {index} {why}")

    def no_grad_fn(self, call: ModuleCall, module: str) -> str:
        """Why the tensor a legacy hook would sit on has no grad_fn, so that it never fires."""
        record = self.record(self.legacy, call.legacy_output)
        first = self.first_output_words(call)
        if call.legacy_output is not None and record is None:
            return f"{module}'s {first} has no grad_fn, so the hook was registered on nothing"
        if record is None:
            return (f"{module}'s result has no tensor where torch looks (item [0] until a "
                    "tensor), so the hook was registered on nothing")
        if record.is_leaf and record.requires_grad:
            return (f"{module}'s {first} has no grad_fn (it returns a leaf unchanged), so the "
                    "hook was registered on nothing")
        return (f"{module}'s {first} does not require grad (an integer tensor, or one made "
                "under no_grad or by detach), so it has no grad_fn and the hook was registered "
                "on nothing")

    def needs_no_grad(self, call: ModuleCall, index: int) -> bool:
        tensors = call.arguments or call.inputs
        record = self.record(self.legacy, tensors[index] if index < len(tensors) else None)
        return record is not None and not record.requires_grad

    def silent(self, call: ModuleCall, legacy: LabelledEvent | None,
               full: LabelledEvent | None, run: int) -> Iterable[Finding]:
        """Why a hook did not fire for this call."""
        module = module_title(self.module)
        number = self.during_backward(call)
        if legacy is None and full is None and number is not None:
            yield Finding("never_fires", f"neither hook fired for call {number} of {module}: "
                          "it ran during the backward (torch.utils.checkpoint runs the forward "
                          "again there, to recompute what it did not save), and the graph that "
                          "run makes is not backpropagated")
            return
        if legacy is None and full is None and not self.full_warnings():
            yield Finding("never_fires", f"neither hook fired in run {run}: no gradient "
                          f"reached {module}")
            return
        if legacy is None:
            why = self.legacy_silence(call, full, run)
            yield Finding("never_fires", f"legacy never fires: {why}")
            if full is not None:
                return
        if self.refusals:
            for refusal in self.refusals:
                yield Finding("refused", f"full never fires: {refusal_text(refusal)}")
            return
        failure = self.full_failure(run)
        if failure is not None:
            yield Finding("never_fires", f"full never fires: torch raised "
                          f"{failure.error.category} in the full pass's run {run} before it "
                          f"could: {first_line_of(failure.error.message)}")
            return
        warned = self.full_warnings()
        hidden = [str(index) for index, tensor in enumerate(call.outputs) if tensor is None]
        why = (f"torch warned: {warned[0]}" if warned
               else f"no gradient reached {module}'s inputs" if not hidden
               else f"no gradient reached {module}'s inputs through its top-level output "
               f"tensors, the only ones full hooks wrap (output {', '.join(hidden)} is not a "
               "tensor: a gradient through the tensors inside it bypasses the hook)")
        yield Finding("never_fires", f"full never fires: {why}")

    def legacy_silence(self, call: ModuleCall, full: LabelledEvent | None, run: int) -> str:
        """Why the legacy hook did not fire for this call."""
        module = module_title(self.module)
        node = self.graph_name(self.legacy, call.legacy_node)
        made = self.legacy_made(call)
        unused_first = full is not None and any(
            arg.name == "grad_output[0]" and arg.value is None for arg in full.args)
        if call.legacy_node is None:
            return self.no_grad_fn(call, module)
        if unused_first:
            return (f"it sits on {node}, which made the first output "
                    f"{self.naming.short(made or '?')}; only a later output is used, so {node} "
                    "never ran")
        return f"the node it sits on ({node}) did not run in run {run}"

    def no_gradient(self, full: LabelledEvent | None, index: int) -> bool:
        """Whether no gradient reaches the module's argument `index`, so that legacy lacks
        nothing there: full's grad_input[index] is None or zeros labelled as such (an argument
        the module never uses, or one without grad), or full did not fire for want of one."""
        if full is None:
            return not self.refusals and not self.full_warnings() and not any(
                walk_pass.failed_runs for walk_pass in self.session.walk.passes)
        arg = next((item for item in full.args if item.name == f"grad_input[{index}]"), None)
        return arg is not None and (arg.value is None or (
            arg.meaning is not None and arg.meaning.kind == "zero"))

    def full_failure(self, run: int) -> PassFailure | None:
        """The full pass's failure of call `run`, where torch refused it there alone (a
        model's own full hook returning a gradient of another shape)."""
        return next((failure for walk_pass in self.session.walk.passes
                     for failure in walk_pass.failed_runs if failure.run == run), None)

    def full_warnings(self) -> list[str]:
        """What torch warned of this module in the full pass (a result full hooks cannot
        wrap: a dict, a list)."""
        return [warning.message for walk_pass in self.session.walk.passes
                if walk_pass.mode == "full" for warning in walk_pass.warnings
                if warning.module == self.module]


def _position(name: str) -> tuple[str, int]:
    """`grad_input[2]` -> ("grad_input", 2)."""
    kind, _, rest = name.partition("[")
    return kind, int(rest.rstrip("]") or 0)


def _ordered(names: list[str]) -> list[str]:
    """grad_input[0], grad_input[1], ... then grad_output[0], ..., each once."""
    def key(name: str) -> tuple[int, int]:
        kind, position = _position(name)
        return (0 if kind == "grad_input" else 1, position)
    return sorted(dict.fromkeys(names), key=key)


__all__ = ["compare"]
