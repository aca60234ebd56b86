"""The tracer: the only place that registers hooks. One pass = one build, every hook, one record.

A pass registers, inside one ExitStack so that all of them are removed even on error:
forward pre-hooks and forward hooks on every module; legacy `register_backward_hook` (mode
"legacy") or `register_full_backward_pre_hook` + `register_full_backward_hook` (mode "full") on
every module; a tensor hook on every named tensor that requires grad; a post-accumulate-grad hook
on every leaf that requires grad; and, once the forward has built the graph, a Node pre-hook and
post-hook on every autograd node reachable from what the spec differentiates. Then it runs the
spec's backward and autograd.grad calls. Every call of every hook becomes an Event, in firing
order, with its arguments copied to plain values at once (hooks never change what flows).

Legacy and full module hooks cannot share a module (torch raises), hence two passes on two
identical builds. The full pass leaves full hooks off the modules torch would refuse them on
(an in-place op on what they wrap: `inplace` finds them, the PassTrace keeps them as refusals).
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import nn

from gradexplain.capture.buckets import bucket_recorder
from gradexplain.capture.build import Built, make_tensor, observe
from gradexplain.capture.outputs import OUTPUT_NESTING
from gradexplain.capture.user_hooks import user_hooks
from gradexplain.capture.usercode import kind_of, user_frame, with_article
from gradexplain.capture.values import grad_outputs, still_stored, tensor_value
from gradexplain.errors import ExpectationError, Location, ModelRunError
from gradexplain.records.names import ACCUMULATE, IDENTITY_NODES, canonical_name, op_name
from gradexplain.records.trace import (
    Arg,
    Event,
    GraphNode,
    HookKind,
    Mode,
    ModuleCall,
    PassTrace,
    Phase,
    Refusal,
    Run,
    RunError,
    TensorRecord,
    TensorValue,
    UserHook,
    Warning_,
)

Node = Any  # torch.autograd.graph.Node: C++ node classes without a usable static type


def trace(built: Built, mode: Mode, refusals: tuple[Refusal, ...] = ()) -> PassTrace:
    """Run `built` forward and backward with every hook registered; return what they saw.
    In the full pass, the modules named in `refusals` get no full hooks (torch would refuse
    them: see `inplace`); every other hook stays."""
    recorder: _Recorder | None = None
    try:
        with ExitStack() as hooks, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            recorder = _Recorder(built, mode, hooks)
            recorder.refusals = refusals
            recorder.caught = caught
            # First in, so last out: the user's hooks are put back after ours are removed.
            recorder.user_hooks = hooks.enter_context(user_hooks(built.model, mode, recorder))
            recorder.register_module_hooks(hooks)
            recorder.register_leaf_hooks(hooks)
            buckets = bucket_recorder(built.wrapper, built.model, recorder.position)
            if buckets is not None:
                buckets.register()  # DDP keeps it for the life of its (one-pass) wrapper
            with observe(recorder.named):
                recorder.run_forward()
            recorder.register_node_hooks(hooks)
            recorder.run_backward()
        result = recorder.result()
    finally:
        if recorder is not None:
            recorder.release()
    return result if buckets is None else replace(result, buckets=buckets.calls())


class _Recorder:
    """The state of one pass while it runs: events so far, tensors met, nodes met."""

    def __init__(self, built: Built, mode: Mode, hooks: ExitStack) -> None:
        self.built = built
        self.spec = built.spec
        self.mode = mode
        self.phase: Phase = "forward"
        self.run = 0
        self.events: list[Event] = []
        self.caught: list[warnings.WarningMessage] = []
        self.warnings: list[Warning_] = []
        # Tensors are kept alive here so that id() stays unique for the whole pass. A tensor
        # changed in place is another tensor from then on (`relu_` on a BatchNorm output): it
        # is keyed by its grad_fn too, and `tensor_nodes` keeps the grad_fn each one had.
        self.tensor_objects: list[torch.Tensor] = []
        self.tensor_nodes: list[Node | None] = []
        self.output_numbers: list[int] = []
        self.tensor_index: dict[tuple[int, Node | None], int] = {}
        self.tensor_names: list[list[str]] = []
        self.name_owner: dict[str, int] = {}
        self.name_uses: dict[str, int] = {}
        self.input_names = {spec.name for spec in built.spec.inputs}
        self.node_ids: dict[Node, str] = {}
        self.node_objects: list[Node] = []
        # The nodes of the traced graph, each with our Node hooks: a node met later (made by
        # a forward run again inside the backward) is in node_ids but was never hooked.
        self.hooked: set[Node] = set()
        # The node whose pre-hooks ran last: module backward hooks are post-hooks of that node.
        self.current_node: Node | None = None
        self.calls: list[ModuleCall] = []
        # Each module's calls under way: the tensors its forward pre-hook saw, positional and
        # by keyword, until its forward hook makes the call's record.
        self.arguments: dict[str, list[tuple[tuple[int | None, ...],
                                             tuple[tuple[str, int], ...]]]] = {}
        self.runs: list[Run] = []
        # What the top-level model returned, by the names it returns them under: with full hooks
        # these are BackwardHookFunction views of the tensors named inside the model.
        self.returned: dict[str, torch.Tensor] = {}
        self.auto_names = built.spec.python is not None
        self.hooks = hooks  # every hook of the pass is entered here, so all are removed
        self.user_hooks: list[UserHook] = []  # the user's own, found on the build
        self.held: list[torch.Tensor] = []  # the tensors the model hooked as it ran
        self.refusals: tuple[Refusal, ...] = ()

    # Set once the pass is over (`release`): every hook of this recorder then does nothing.
    released = False

    def release(self) -> None:
        """Drop everything the pass held, once its record is made. Removing a module's hooks
        does not remove what torch put on the graph for them during the forward: a legacy
        hook is registered on its output's grad_fn, a full hook on its BackwardHookFunction.
        Those hooks reach this recorder, which reaches the pass's tensors, which reach the
        graph: a cycle through torch's C++ nodes that Python's collector cannot see, so every
        pass's build, graph and gradients (90 MB for a 50-layer MLP) lived as long as the
        process. Emptied, the recorder reaches nothing, and the pass is freed as it ends."""
        self.__dict__.clear()
        self.released = True

    def live(self, hook: Callable[..., None]) -> Callable[..., None]:
        """`hook`, doing nothing once the pass is over. A model that keeps a tensor of this
        pass's graph beyond it (in a global, which no deep copy separates) may backpropagate
        through it in a later pass, and the hooks torch left on that graph then run: as
        without gradexplain, they are not there to record anything."""
        def guarded(*args: Any) -> None:
            if not self.released:
                hook(*args)
        return guarded

    # --- tensors and nodes -----------------------------------------------------------------

    def index(self, tensor: torch.Tensor) -> int:
        key = _key(tensor)
        if key not in self.tensor_index:
            self.tensor_index[key] = len(self.tensor_objects)
            self.tensor_objects.append(tensor)
            self.tensor_nodes.append(key[1])
            self.output_numbers.append(tensor.output_nr if key[1] is not None else 0)
            self.tensor_names.append([])
        return self.tensor_index[key]

    def canonical(self, index: int) -> str:
        """The top-level name if the tensor has one, else the first module-qualified one."""
        return canonical_name(self.tensor_names[index]) or f"tensor#{index}"

    def named(self, name: str, value: Any, hook: bool = True) -> None:
        """A step (or argument, or leaf) gave `value` a name; hook it the first time we see it
        (unless not to `hook`).

        A name belongs to the first tensor that gets it. When the same name comes again for
        another tensor (a module called a second time), that tensor is named `name@2`, and so on.
        With full backward hooks the top-level module's arguments are views of the inputs
        (BackwardHookFunction wraps them): those views also answer to the input's name, but the
        input keeps its hook and is what the name refers to.
        """
        if not isinstance(value, torch.Tensor):
            return
        owner = self.name_owner.get(name)
        if owner is not None:
            if owner == self.tensor_index.get(_key(value)):
                return
            if name in self.input_names:
                # The model's own view of an input: it answers to the input's name, but the
                # name (and the tensor hook) stay with the input itself.
                self.tensor_names[self.index(value)].append(name)
                return
            self.name_uses[name] = self.name_uses.get(name, 1) + 1
            name = f"{name}@{self.name_uses[name]}"
        index = self.index(value)
        first = not self.tensor_names[index]
        self.tensor_names[index].append(name)
        self.name_owner[name] = index
        if first and hook and value.requires_grad:
            self.enter(self.hooks, value.register_hook(self.tensor_hook(index)))

    def name_gathered(self, path: str, module: nn.Module) -> None:
        """FSDP2 runs a module's forward on parameters it has all-gathered, tensors of their
        own in place of the sharded ones the walk hooked: each is named after its parameter
        (`fc2.weight:gathered`), so that labels say what it is. Not hooked: no user's hook is
        on it either. Under DDP, and in one process, the parameters are the leaves themselves."""
        for name, parameter in module.named_parameters(prefix=path, recurse=False):
            if _key(parameter) not in self.tensor_index:
                self.named(f"{name}:gathered", parameter, hook=False)

    def leaf_index(self, leaf: torch.Tensor | None) -> int | None:
        return None if leaf is None else self.tensor_index.get((id(leaf), None))

    def node_id(self, node: Node | None) -> str | None:
        if node is None:
            return None
        if node not in self.node_ids:
            self.node_ids[node] = f"n{len(self.node_objects)}"
            self.node_objects.append(node)
        return self.node_ids[node]

    def args(self, prefix: str, values: Sequence[Any]) -> list[Arg]:
        return [self.arg(f"{prefix}[{i}]", value) for i, value in enumerate(values)]

    def arg(self, name: str, value: Any) -> Arg:
        if not isinstance(value, torch.Tensor):
            return Arg(name, None, None)
        known = self.tensor_index.get(_key(value))
        if known is None and self.phase == "forward":
            known = self.index(value)
        return Arg(name, tensor_value(value), known)

    def position(self) -> tuple[int, int | None]:
        """The run under way and the last event so far (None: none yet)."""
        return self.run, (len(self.events) - 1 if self.events else None)

    def record(self, hook: HookKind, target: str, node: Node | None, args: list[Arg]) -> None:
        self.flush_warnings()
        name = None if node is None else node.name()
        self.events.append(Event(len(self.events), self.phase, self.run, hook, target, name,
                                 tuple(args), self.node_ids.get(node)))

    def tensor_name(self, tensor: torch.Tensor) -> str | None:
        """The name a tensor has in this pass so far (None: not named yet, or unknown)."""
        known = self.tensor_index.get(_key(tensor))
        return None if known is None or not self.tensor_names[known] else self.canonical(known)

    def hold(self, tensor: torch.Tensor) -> Callable[[], torch.Tensor | None]:
        self.held.append(tensor)
        return partial(self._held, len(self.held) - 1)

    def _held(self, index: int) -> torch.Tensor | None:
        return None if self.released else self.held[index]

    def user_args(self, prefix: str, values: Any) -> list[Arg]:
        """A user hook's arguments as recorded: `prefix[i]` for a tuple, `prefix` alone else
        (nothing, once the pass is over: see `live`)."""
        if self.released:
            return []
        if isinstance(values, (tuple, list)):
            return self.args(prefix, values)
        return [self.arg(prefix, values)]

    def user_call(self, hook: HookKind, target: str, function: str, received: list[Arg],
                  returned: list[Arg] | None, changed: bool,
                  tensor: torch.Tensor | None) -> None:
        """One call of one of the user's own hooks, on the node and under the name one of
        gradexplain's hooks of the same kind and place would have (none once the pass is
        over: see `live`)."""
        if self.released:
            return
        node: Node | None = None
        if tensor is not None:
            known = self.tensor_index.get(_key(tensor))
            target = target if known is None else self.canonical(known)
            node = tensor.grad_fn
        elif hook in ("backward", "full_backward", "full_backward_pre"):
            node = self.current_node
        self.flush_warnings()
        self.events.append(Event(
            len(self.events), self.phase, self.run, hook, target,
            None if node is None else node.name(), tuple(received), self.node_ids.get(node),
            function, None if returned is None else tuple(returned), changed))

    def flush_warnings(self) -> None:
        after = len(self.events) - 1 if self.events else None
        for message in self.caught[len(self.warnings):]:
            self.warnings.append(Warning_(message.category.__name__, str(message.message),
                                          self.phase, after))

    # --- hooks ----------------------------------------------------------------------------

    def register_module_hooks(self, hooks: ExitStack) -> None:
        refused = {refusal.module for refusal in self.refusals}
        for path, module in self.built.model.named_modules():
            self.enter(hooks, module.register_forward_pre_hook(self.forward_pre_hook(path),
                                                               with_kwargs=True))
            self.enter(hooks, module.register_forward_hook(self.forward_hook(path)))
            if self.mode == "legacy":
                self.enter(hooks, module.register_backward_hook(
                    self.backward_hook(path, "backward")))
            elif path not in refused:
                self.enter(hooks, module.register_full_backward_pre_hook(
                    self.full_backward_pre_hook(path)))
                self.enter(hooks, module.register_full_backward_hook(
                    self.backward_hook(path, "full_backward")))

    def register_leaf_hooks(self, hooks: ExitStack) -> None:
        for name, tensor in self.built.leaves().items():
            self.named(name, tensor)
            if tensor.requires_grad:
                self.enter(hooks, tensor.register_post_accumulate_grad_hook(
                    self.post_accumulate_hook(name)))

    def enter(self, hooks: ExitStack, handle: Any) -> None:
        """A hook torch registered, to remove when the pass ends. torch returns a handle; a
        model whose code replaced torch's registration (a monkeypatch) hands back something
        else, and that is said as the model's doing, not as an error of gradexplain's."""
        if not (hasattr(handle, "remove") and hasattr(handle, "__exit__")):
            raise ModelRunError(
                f"{self.target()}: registering a hook gave "
                f"{kind_of(handle)}, not "
                "torch's handle: the model's code has replaced one of torch's hook "
                "registration functions, which gradexplain registers every hook through")
        hooks.enter_context(handle)

    def register_node_hooks(self, hooks: ExitStack) -> None:
        """Hook every node reachable from what the spec differentiates, numbered breadth-first."""
        queue = deque(tensor.grad_fn for tensor in self.roots() if tensor.grad_fn is not None)
        seen: set[Node] = set()
        while queue:
            node = queue.popleft()
            if node in seen:
                continue
            seen.add(node)
            self.hooked.add(node)
            node_id = self.node_id(node)
            assert node_id is not None
            self.enter(hooks, node.register_prehook(self.node_pre_hook(node)))
            self.enter(hooks, node.register_hook(self.node_hook(node)))
            queue.extend(child for child, _ in node.next_functions if child is not None)

    def roots(self) -> list[torch.Tensor]:
        names = [backward.of for backward in self.spec.backwards]
        names += [call.of for call in self.spec.grads]
        return [self.differentiated(name) for name in names]

    def tensor_named(self, name: str) -> torch.Tensor:
        return self.tensor_objects[self.name_owner[name]]

    def forward_pre_hook(self, path: str) -> Any:
        def hook(module: nn.Module, inputs: tuple[Any, ...], keywords: dict[str, Any]) -> None:
            if self.built.wrapper is not None:
                self.name_gathered(path, module)
            args = self.args("input", inputs)
            by_keyword = tuple((name, self.index(value)) for name, value in keywords.items()
                               if isinstance(value, torch.Tensor))
            self.arguments.setdefault(path, []).append(
                (tuple(arg.tensor for arg in args), by_keyword))
            self.record("forward_pre", path, None, args)
        return self.live(hook)

    def name_outputs(self, path: str, outputs: Sequence[Any]) -> None:
        """A Python model has no step names: a module's outputs are named by its path and the op
        that made them (`encoder.0:addmm`), the same in both passes and every run."""
        for number, value in enumerate(outputs):
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                suffix = "" if len(outputs) == 1 else f".{number}"
                self.named(f"{path}:{_grad_fn_op(value)}{suffix}", value)

    def forward_hook(self, path: str) -> Any:
        def hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            if self.mode == "legacy" and _endless_for_legacy_hooks(output):
                self.refuse_endless(path, output)
            outputs = output if isinstance(output, tuple) else (output,)
            args = self.args("input", inputs)
            if isinstance(output, tuple):
                args += self.args("output", outputs)
            else:
                args.append(self.arg("output", output))
            self.record("forward", path, None, args)
            if self.auto_names and path:
                self.name_outputs(path, outputs)
            # Where torch puts a legacy hook; the full pass, which has none, keeps to the top
            # level (a nested first tensor's node would be named though no backward reaches it).
            first = (_legacy_target(output) if self.mode == "legacy" else
                     next((item for item in outputs if isinstance(item, torch.Tensor)), None))
            arguments, keywords = (self.arguments[path].pop() if self.arguments.get(path)
                                   else ((), ()))
            first_index = None if first is None else self.index(first)
            returned = _returned_argument(inputs, first)
            if (self.mode == "legacy" and returned is not None
                    and (returned >= len(arguments) or arguments[returned] != first_index)):
                # Its grad_fn is the argument's only since an in-place op of this forward
                # (ReLU(inplace=True)): the module made that node, it did not return the
                # argument as it got it.
                returned = None
            self.calls.append(ModuleCall(
                path,
                tuple(arg.tensor for arg in args if arg.name.startswith("input")),
                tuple(arg.tensor for arg in args if arg.name.startswith("output")),
                self.node_id(None if first is None else first.grad_fn),
                arguments,
                returned,
                keywords,
                first_index,
            ))
        return self.live(hook)

    def target(self) -> str:
        """The model as errors name it: a Python model's `FILE.py:NAME`, else the spec's name."""
        python = self.spec.python
        return python.target if python is not None else self.spec.name

    def refuse_endless(self, path: str, output: Any) -> None:
        whose = f"the forward of {path}" if path else "its forward"
        raise ModelRunError(
            f"{self.target()}: {whose} returned {with_article(type(output).__name__)} with "
            "no tensor in it; gradexplain puts a legacy backward hook on every module, and "
            "torch looks for a tensor in a module's result for it by taking item [0] until it "
            "finds one, which on this never ends: return a tensor (or a tuple/dict of tensors)")

    def backward_hook(self, path: str, kind: HookKind) -> Any:
        """A legacy ("backward") or full ("full_backward") module hook: same signature."""
        def hook(module: nn.Module, grad_input: tuple[Any, ...],
                 grad_output: tuple[Any, ...]) -> None:
            self.in_traced_graph(path)
            self.record(kind, path, self.current_node,
                        self.args("grad_input", grad_input) + self.args("grad_output",
                                                                          grad_output))
        return self.live(hook)

    def in_traced_graph(self, path: str) -> None:
        """Refuse a module backward hook fired by a node outside the traced graph: a backward
        run inside the backward (a reentrant checkpoint recomputes its forward and calls
        autograd.backward on it) fires hooks on a graph made after ours was hooked, and read
        against the node that runs it they would get the wrong labels."""
        running = torch._C._current_autograd_node()
        if running is None or running in self.hooked:
            return
        target = self.target()
        if self.phase == "forward":
            raise ModelRunError(
                f"{target}: the backward hook of {path or 'the model'} ran during the forward, "
                f"on {running.name()}: the forward itself backpropagates (torch.autograd.grad "
                "or .backward() inside forward, as a gradient penalty does), before the graph "
                "gradexplain traces is made; gradexplain explains the backward of a finished "
                "forward: take the gradient penalty out of the model explained")
        raise ModelRunError(
            f"{target}: the backward hook of {path or 'the model'} ran inside another "
            f"backward, on {running.name()}, a node made during the backward (torch.utils."
            "checkpoint with use_reentrant=True recomputes its forward and backpropagates "
            "through it from inside the outer backward, and so does a custom Function whose "
            "backward calls autograd): gradexplain cannot tie those hook arguments to the "
            "graph it traced; use_reentrant=False (torch's recommendation) walks")

    def full_backward_pre_hook(self, path: str) -> Any:
        def hook(module: nn.Module, grad_output: tuple[Any, ...]) -> None:
            self.in_traced_graph(path)
            self.record("full_backward_pre", path, self.current_node,
                        self.args("grad_output", grad_output))
        return self.live(hook)

    def tensor_hook(self, index: int) -> Any:
        def hook(grad: torch.Tensor) -> None:
            # The grad_fn the tensor had when hooked: a hook put on before an in-place change
            # receives the gradient of the tensor as it was then.
            self.record("tensor", self.canonical(index), self.tensor_nodes[index],
                        [self.arg("grad", grad)])
        return self.live(hook)

    def post_accumulate_hook(self, name: str) -> Any:
        def hook(tensor: torch.Tensor) -> None:
            index = self.tensor_index.get(_key(tensor))
            if index is None:
                # Not the leaf: a user's hook before this one returned a value, which torch
                # hands on to the next hook and then refuses (it must return None).
                return
            # The hook receives the leaf itself; what it is there to show is the .grad just
            # accumulated, so that is the value recorded under the argument's name.
            self.record("post_accumulate_grad", name, None,
                        [Arg("tensor", tensor_value(tensor.grad), index)])
        return self.live(hook)

    def node_pre_hook(self, node: Node) -> Any:
        def hook(grad_outputs: tuple[Any, ...]) -> None:
            self.current_node = node
            self.record("node_pre", self.node_ids[node], node,
                        self.args("grad_outputs", grad_outputs))
        return self.live(hook)

    def node_hook(self, node: Node) -> Any:
        def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
            self.record("node", self.node_ids[node], node,
                        self.args("grad_inputs", grad_inputs)
                        + self.args("grad_outputs", grad_outputs))
        return self.live(hook)

    # --- running ----------------------------------------------------------------------------

    def run_forward(self) -> None:
        self.returned = self.built.forward()
        for value in self.returned.values():
            self.index(value)

    def differentiated(self, name: str) -> torch.Tensor:
        """The tensor a backward or grad of `name` starts from: what a caller of the model holds
        for a returned name (`z = model(x); z.backward()`), else the tensor with that name."""
        returned = self.returned.get(name)
        return returned if returned is not None else self.tensor_named(name)

    def run_backward(self) -> None:
        """The spec's backward calls in order, then its autograd.grad calls. torch's errors are
        recorded on the run (expected or not) and the next call still runs, as in a notebook."""
        self.flush_warnings()  # what the forward warned belongs to the forward
        self.phase = "backward"
        leaves = [tensor for tensor in self.built.leaves().values() if tensor.requires_grad]
        fresh = True
        for number, backward in enumerate(self.spec.backwards):
            gradient = None if backward.gradient is None else make_tensor(backward.gradient)
            for time in range(backward.times):
                zero = backward.zero_grad if time == 0 else backward.zero_grad_between
                if zero:
                    for leaf in leaves:
                        leaf.grad = None
                of = self.differentiated(backward.of)
                before = self.leaf_grads()
                self.run += 1
                error = self.attempt(
                    lambda: torch.autograd.backward(of, gradient,  # noqa: B023
                                                    retain_graph=backward.retain_graph),  # noqa: B023
                    of, backward.expect_error, backward.where)
                self.runs.append(Run(self.run, "backward", backward.of, (), (),
                                     self.tensor_index.get(_key(of)), fresh or zero, number,
                                     tensor_value(gradient), before, self.leaf_grads(), error))
                fresh = False
        for number, call in enumerate(self.spec.grads):
            of = self.differentiated(call.of)
            inputs = [self.tensor_named(name) for name in call.wrt]
            seed = None if call.grad_outputs is None else grad_outputs(call.grad_outputs, of)
            before = self.leaf_grads()
            self.run += 1
            result: tuple[torch.Tensor | None, ...] = ()

            def run_grad() -> None:
                nonlocal result
                result = torch.autograd.grad(of, inputs, seed,  # noqa: B023
                                             retain_graph=call.retain_graph,  # noqa: B023
                                             allow_unused=True)

            error = self.attempt(run_grad, of, call.expect_error, call.where)
            self.runs.append(Run(self.run, "grad", call.of, call.wrt,
                                 tuple(tensor_value(item) for item in result),
                                 self.tensor_index.get(_key(of)), True, number,
                                 tensor_value(seed), before, self.leaf_grads(), error))

    def leaf_grads(self) -> tuple[tuple[str, TensorValue | None], ...]:
        return tuple((name, tensor_value(tensor.grad))
                     for name, tensor in self.built.leaves().items() if tensor.requires_grad)

    def attempt(self, action: Any, of: torch.Tensor, expect: str | None,
                where: Location) -> RunError | None:
        """Run one backward or grad call; what torch raises becomes a RunError (expected if its
        message contains `expect`). Saved tensors already freed are named while the graph is
        still at hand, for the explanation."""
        try:
            action()
        except RuntimeError as exc:
            if self.spec.python is not None and user_frame(exc) is not None:
                raise  # the model's own hook raised it, not torch refusing the call (usercode)
            message = str(exc)
            expected = expect is not None and expect.lower() in message.lower()
            return RunError(type(exc).__name__, message, expected, of.requires_grad,
                            tuple(of.shape), self.freed_saved_tensors())
        if expect is not None:
            # What was meant to fail did not: that is a spec to fix, said with its place.
            raise ExpectationError(f"expected torch to raise an error containing {expect!r}, but "
                               "the call succeeded", where)
        return None

    def freed_saved_tensors(self) -> tuple[str, ...]:
        """Each hooked node whose saved tensors can no longer be read: `MulBackward0 (self)`."""
        freed = []
        for node in self.node_objects:
            lost = []
            for attribute in sorted(name for name in dir(node) if name.startswith("_saved_")):
                try:
                    getattr(node, attribute)
                except RuntimeError:
                    lost.append(attribute.removeprefix("_saved_"))
            if lost:
                freed.append(f"{node.name()} ({', '.join(lost)})")
        return tuple(freed)

    def result(self) -> PassTrace:
        self.flush_warnings()
        tensors: list[TensorRecord] = []
        for index, tensor in enumerate(self.tensor_objects):
            node = self.tensor_nodes[index]
            # Changed in place since: its values now are another tensor's (recorded there).
            overwritten = node is not tensor.grad_fn
            if node is None and tensor.requires_grad:
                node = _accumulate_grad_node(tensor)
            tensors.append(TensorRecord(
                index, tuple(self.tensor_names[index]), tuple(tensor.shape),
                tensor.requires_grad, tensor.is_leaf, self.node_ids.get(node),
                self.output_numbers[index],
                tensor_value(tensor) if self.tensor_names[index] and not overwritten
                and still_stored(tensor) else None,
            ))
        made = _creation_order(self.node_objects)
        graph = tuple(
            GraphNode(
                self.node_ids[node],
                node.name(),
                tuple((self.node_ids.get(child), number) for child, number in
                      node.next_functions),
                self.leaf_index(getattr(node, "variable", None)),
                made.get(node),
                _output_shapes(node),
            )
            for node in self.node_objects
        )
        # The last call's `.grad`s after it were just recorded, and nothing has run since.
        after = dict(self.runs[-1].after) if self.runs else {}
        grads = tuple((name, after[name] if name in after else tensor_value(tensor.grad))
                      for name, tensor in self.built.leaves().items())
        return PassTrace(self.mode, tuple(self.events), tuple(tensors), graph,
                         tuple(self.calls), tuple(self.runs), grads, tuple(self.warnings),
                         tuple(self.user_hooks), self.refusals)


def _output_shapes(node: Node) -> tuple[tuple[int, ...], ...]:
    """The shapes of a node's outputs, as torch keeps them to check the gradients coming
    back (nothing where a node keeps none it can give)."""
    try:
        return tuple(tuple(meta.shape) for meta in node._input_metadata)
    except (AttributeError, RuntimeError, TypeError):
        return ()


def _legacy_search(output: Any) -> Iterator[Any]:
    """Each item of a module's result that torch's search for a legacy backward hook's tensor
    visits, from the result itself: item [0] until a tensor, a dict's first tensor value.
    It ends after a tensor, where torch's step would raise (None, an int, a dict without a
    tensor: said by `usercode.not_a_tensor_returned`), or as deep as any real result nests."""
    item = output
    for _ in range(OUTPUT_NESTING):
        yield item
        if isinstance(item, torch.Tensor):
            return
        try:
            item = (next(value for value in item.values() if isinstance(value, torch.Tensor))
                    if isinstance(item, dict) else item[0])
        except Exception:  # torch raises there too, and that is said where it does
            return


def _legacy_target(output: Any) -> torch.Tensor | None:
    """The tensor whose grad_fn torch puts a legacy backward hook on: the first tensor of a
    nested tuple's first part, not the first tensor at the top level. None where the search
    finds none."""
    visited = list(_legacy_search(output))
    return visited[-1] if visited and isinstance(visited[-1], torch.Tensor) else None


def _endless_for_legacy_hooks(output: Any) -> bool:
    """Whether torch's search never ends: a str's item [0] is a str again."""
    return any(isinstance(item, str) for item in _legacy_search(output))


def _creation_order(nodes: Sequence[Node]) -> dict[Node, int]:
    """Each node's place in the order the forward made them, from torch's sequence numbers
    (which count every op of the thread, so only their order is kept: the same in every
    process). A leaf's AccumulateGrad has no number of its own (torch gives it the largest)."""
    numbered = [(node._sequence_nr(), index) for index, node in enumerate(nodes)
                if node.name() != ACCUMULATE]
    return {nodes[index]: place for place, (_, index) in enumerate(sorted(numbered))}


def _returned_argument(inputs: Sequence[Any], first: torch.Tensor | None) -> int | None:
    """Which argument a module returned as its first output, as it got it (the same autograd
    node): then the legacy hook sits on an op the caller made, not the module."""
    if first is None or first.grad_fn is None:
        return None
    return next((index for index, item in enumerate(inputs)
                 if isinstance(item, torch.Tensor) and item.grad_fn is first.grad_fn), None)


def _grad_fn_op(tensor: torch.Tensor) -> str:
    """The op that made a tensor, as a name part: AddmmBackward0 -> addmm. A full backward
    hook's wrapper (HOOK_WRAPPER) is looked through, along the edge of this tensor's own output
    number (a module returning its second argument: the wrapper's edge 1), so both passes
    agree."""
    node: Node = tensor.grad_fn
    number = tensor.output_nr
    while node.name() in IDENTITY_NODES and number < len(node.next_functions):
        inner, number = node.next_functions[number]
        if inner is None:
            break
        node = inner
    return op_name(node.name())


def _key(tensor: torch.Tensor) -> tuple[int, Node | None]:
    """A tensor as the pass tells tensors apart: the object, and its grad_fn now (which an
    in-place op replaces, so the tensor before and after it are two)."""
    return id(tensor), tensor.grad_fn


def _accumulate_grad_node(leaf: torch.Tensor) -> Node | None:
    """A leaf's AccumulateGrad node, which torch only exposes through an expression using it."""
    probe = leaf.view_as(leaf)
    node = probe.grad_fn
    if node is None or not node.next_functions:
        return None
    return node.next_functions[0][0]


__all__ = ["trace"]
