"""What a traced run leaves behind: plain, frozen, JSON-able data. No torch here.

Everything after the trace (labels, checks, the derivation, every renderer) reads only these types,
which is what lets a run be saved once and rendered many ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from gradexplain.records.frozen import quick_init

Nested = float | int | bool | list["Nested"]

Mode = Literal["legacy", "full"]
Phase = Literal["forward", "backward"]
HookKind = Literal[
    "forward_pre",
    "forward",
    "backward",
    "full_backward_pre",
    "full_backward",
    "tensor",
    "post_accumulate_grad",
    "node_pre",
    "node",
]

# Tensors above this many elements keep a summary instead of every value (DESIGN section 5).
VALUE_LIMIT = 10_000
# Python models' activations are large: copying every value of each is what makes a walk slow.
PYTHON_VALUE_LIMIT = 1_000


@quick_init
@dataclass(frozen=True)
class Summary:
    min: float
    max: float
    mean: float
    norm: float


@quick_init
@dataclass(frozen=True)
class TensorValue:
    """A tensor as recorded: its shape, and its values in full precision or a summary."""

    shape: tuple[int, ...]
    dtype: str
    value: Nested | None
    summary: Summary | None = None


@quick_init
@dataclass(frozen=True)
class Arg:
    """One argument of one hook call; `value` is None where the argument is None.

    `tensor` is the index of the TensorRecord the argument is, for tensors the forward met
    (inputs, outputs, leaves); gradients flowing in backward are fresh tensors and have None.
    """

    name: str
    value: TensorValue | None
    tensor: int | None


@quick_init
@dataclass(frozen=True)
class Event:
    """One hook call. `run` says which backward or grad call it belongs to (0 for the forward).

    `node` is the name of the autograd node involved and `node_id` its graph id: for node hooks
    the node itself; for module backward hooks the node they ran on (legacy hooks sit on the
    module's last node, full hooks on BackwardHookFunctionBackward wrappers).
    """

    seq: int
    phase: Phase
    run: int
    hook: HookKind
    target: str
    node: str | None
    args: tuple[Arg, ...]
    node_id: str | None = None
    # The user's own hooks (a Python model's, kept and recorded: capture/user_hooks.py): `user`
    # names the user's function (None: one of gradexplain's hooks); `returned` is what it
    # returned in place of its arguments (None: it returned None, so nothing was replaced);
    # `changed` says the replacement differs from what it received (for a post-accumulate-grad
    # hook: it changed `.grad` in place).
    user: str | None = None
    returned: tuple[Arg, ...] | None = None
    changed: bool = False


UserHookScope = Literal["module", "tensor", "global"]


@dataclass(frozen=True)
class UserHook:
    """A hook the user's model came with, and whether this pass ran it (and why not).

    `scope` says where it was registered: on a module (`target` its path, "" the model), on a
    parameter (`target` its name), or globally for every module (`target` ""). `function` is
    the user's function's name. A hook torch cannot combine with the pass's own hooks is not
    run in that pass: `ran` is False and `why` says which rule of torch's forbids it.
    """

    hook: HookKind
    scope: UserHookScope
    target: str
    function: str
    ran: bool
    why: str | None = None


@quick_init
@dataclass(frozen=True)
class Warning_:
    """A warning torch emitted, with the event it followed (its module is that event's target)."""

    category: str
    message: str
    phase: Phase
    after_seq: int | None


@quick_init
@dataclass(frozen=True)
class TensorRecord:
    """A tensor object the run met: every name it had, and where it sits in the autograd graph."""

    index: int
    names: tuple[str, ...]
    shape: tuple[int, ...]
    requires_grad: bool
    is_leaf: bool
    node: str | None  # graph node id of its grad_fn (or of its AccumulateGrad for a leaf)
    output_nr: int
    value: TensorValue | None = None  # its forward value, for named tensors


@quick_init
@dataclass(frozen=True)
class GraphNode:
    """One autograd node. `next` holds its next_functions edges: (node id or None, input_nr).
    `made` is its place in the order the forward made the pass's nodes (0 first); None for a
    leaf's AccumulateGrad, which no op makes. `shapes` are the shapes of its outputs (the
    gradients it takes back): what an unnamed tensor's shape is known by."""

    id: str
    name: str
    next: tuple[tuple[str | None, int], ...]
    variable: int | None  # for AccumulateGrad: the leaf tensor's index
    made: int | None = None
    shapes: tuple[tuple[int, ...], ...] = ()


@quick_init
@dataclass(frozen=True)
class ModuleCall:
    """One call of a module: what went in, what came out, and where a legacy hook would sit.

    `inputs` are the tensors forward saw (with full hooks: BackwardHookFunction views);
    `arguments` the caller's own tensors, as the forward pre-hook saw them. `returns_argument`
    is the argument the module returned as its first output as it got it, if it did: then the
    legacy node is an op the caller made. `keywords` are the tensors passed by keyword (name,
    tensor), which full hooks leave out of grad_input: torch gives it positional arguments only.
    `legacy_output` is the tensor whose grad_fn a legacy hook sits on: torch takes the result's
    item [0] until a tensor (a dict's first tensor value), so a nested tuple's first part.
    """

    module: str
    inputs: tuple[int | None, ...]
    outputs: tuple[int | None, ...]
    legacy_node: str | None  # grad_fn of the first output tensor at return, if it has one
    arguments: tuple[int | None, ...] = ()
    returns_argument: int | None = None
    keywords: tuple[tuple[str, int], ...] = ()
    legacy_output: int | None = None


@dataclass(frozen=True)
class RunError:
    """What torch raised in a backward or grad call, and what the run knew when it did.

    `freed` names the nodes whose saved tensors had already been freed (by an earlier backward
    without retain_graph), each with the saved values it had lost: `MulBackward0 (self)`.
    """

    category: str
    message: str
    expected: bool
    requires_grad: bool
    shape: tuple[int, ...]
    freed: tuple[str, ...] = ()


Grads = tuple[tuple[str, TensorValue | None], ...]


@quick_init
@dataclass(frozen=True)
class Run:
    """One backward or autograd.grad call of the pass, numbered from 1 in the order run.

    `call` is its index in the spec's `backward` list (kind backward) or `grad` list (kind
    grad); `root` is the tensor differentiated; `fresh` says the leaves' `.grad` was empty (or
    zeroed) before a backward run, so what it accumulates starts from nothing. `before` and
    `after` are every leaf's `.grad` around the call; `error` what torch raised, if it did.
    """

    index: int
    kind: Literal["backward", "grad"]
    of: str
    wrt: tuple[str, ...]
    result: tuple[TensorValue | None, ...]
    root: int | None = None
    fresh: bool = True
    call: int = 0
    seed: TensorValue | None = None
    before: Grads = ()
    after: Grads = ()
    error: RunError | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


RefusalReason = Literal["input", "output", "aliased", "return_type"]


@dataclass(frozen=True)
class Refusal:
    """A module torch would refuse full backward hooks on, so the full pass leaves them off it.

    Full hooks hand the module's forward BackwardHookFunction views of its inputs and its
    caller views of its outputs; torch forbids changing such a view, or anything sharing its
    memory, in place. `reason` says which: "input" (changed during the module's own forward),
    "output" (changed after the module returned), "aliased" (found only when the full pass hit
    torch's refusal anyway: a tensor of the call shares memory with one changed in place), or
    "return_type": the module returns a tuple type torch's wrapper cannot rebuild around the
    views it makes (`torch.return_types.sort`: it calls `type(result)(*items)`, and such a
    result takes one sequence), so torch fails with full hooks where the model runs without.
    `op` is the in-place op (`add_`, `relu_`; None where it could not be seen), or for
    "return_type" the op whose result it is (`sort`, that type's name); `operator` its
    Python spelling where the source line shows one (`+=`), `where` the module whose forward was
    running when it happened ("" the model itself; None outside every module's forward).
    """

    module: str
    reason: RefusalReason
    op: str | None = None
    operator: str | None = None
    where: str | None = None


@dataclass(frozen=True)
class BucketCall:
    """One call of DDP's communication hook in a distributed walk (the walk registers one that
    records the bucket, then does what DDP's default hook does: all-reduce, divide by the world
    size). `parameters` are the bucket's parameters in its order; `before` each one's gradient
    as the bucket held it when handed to the hook (shaped as the parameter); `after` the same
    slots once the all-reduce completed, before the division: the sum over ranks (None: it
    never completed). `after_seq` is the event it fired after (None: before every event)."""

    index: int
    run: int
    after_seq: int | None
    parameters: tuple[str, ...]
    before: tuple[TensorValue | None, ...]
    after: tuple[TensorValue | None, ...]


@dataclass(frozen=True)
class PassTrace:
    """Everything one pass (legacy or full module hooks) recorded."""

    mode: Mode
    events: tuple[Event, ...]
    tensors: tuple[TensorRecord, ...]
    graph: tuple[GraphNode, ...]
    calls: tuple[ModuleCall, ...]
    runs: tuple[Run, ...]
    grads: tuple[tuple[str, TensorValue | None], ...]
    warnings: tuple[Warning_, ...]
    user_hooks: tuple[UserHook, ...] = ()  # the user's own hooks found on the build
    # Modules torch would refuse full hooks on (full pass only): no full hooks were put on them.
    refusals: tuple[Refusal, ...] = ()
    # DDP's communication hook calls, in firing order (a distributed walk under DDP only).
    buckets: tuple[BucketCall, ...] = ()

    def named(self, name: str) -> TensorRecord | None:
        return self._by_name.get(name)

    @cached_property
    def _by_name(self) -> dict[str, TensorRecord]:
        """Each name's first record: a view of an input answers to the input's name too."""
        found: dict[str, TensorRecord] = {}
        for record in self.tensors:
            for name in record.names:
                found.setdefault(name, record)
        return found

    def summed_runs(self, upto: int) -> list[Run]:
        """The backward runs whose gradients `.grad` holds after run `upto`: back to the last
        one that started from an empty (or zeroed) `.grad`. A failed run adds nothing."""
        backward = [run for run in self.runs[:upto] if run.kind == "backward"]
        start = max((i for i, run in enumerate(backward) if run.fresh), default=0)
        return [run for run in backward[start:] if not run.failed]
