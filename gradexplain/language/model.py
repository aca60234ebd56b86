"""The spec as frozen dataclasses: what `load_spec` hands to the builder. No torch here.

Every part keeps the Location it was read from, so any later stage (the checker, the builder, a
failing forward step) can point at the line:column and key path in the user's file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from gradexplain.errors import Location
from gradexplain.language.expr import Assignment
from gradexplain.language.shapes import numel

Shape = tuple[int, ...]
Literal_ = float | int | list["Literal_"]
DType = Literal["float32", "float64", "int64"]
InitKind = Literal["value", "randn", "rand", "zeros", "ones"]
INIT_KINDS: tuple[InitKind, ...] = get_args(InitKind)


@dataclass(frozen=True)
class TensorInit:
    """How a tensor gets its values: a literal, or seeded random / constant fill of a shape."""

    kind: InitKind
    shape: Shape
    dtype: DType
    value: Literal_ | None = None
    where: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class InputSpec:
    """A leaf tensor given to the model: `inputs: {x: {value: 5.0, requires_grad: true}}`."""

    name: str
    init: TensorInit
    requires_grad: bool
    where: Location = field(compare=False)


@dataclass(frozen=True)
class ParamSpec:
    """An `nn.Parameter` of a composite module: `params: {p: [3.0, 4.0]}`."""

    name: str
    init: TensorInit
    where: Location = field(compare=False)


KwargValue = int | float | bool | str | None | tuple[int, ...]


@dataclass(frozen=True)
class LayerSpec:
    """A built-in `torch.nn` layer by class name, with keyword arguments and optional weights."""

    name: str
    kind: str
    kwargs: tuple[tuple[str, KwargValue], ...]
    weights: tuple[tuple[str, TensorInit], ...]
    where: Location = field(compare=False)


@dataclass(frozen=True)
class Step:
    """One forward step, `name = expression`, parsed."""

    assignment: Assignment
    where: Location = field(compare=False)

    @property
    def targets(self) -> tuple[str, ...]:
        return self.assignment.targets

    @property
    def text(self) -> str:
        return self.assignment.text


@dataclass(frozen=True)
class ModuleSpec:
    """A composite module: its params, layers, child modules and forward steps.

    The top-level model is a ModuleSpec too, with path "" and the spec's inputs as its arguments.
    """

    name: str
    path: str
    args: tuple[str, ...]
    params: tuple[ParamSpec, ...]
    layers: tuple[LayerSpec, ...]
    modules: tuple[ModuleSpec, ...]
    steps: tuple[Step, ...]
    returns: tuple[str, ...]
    where: Location = field(compare=False)

    def qualify(self, name: str) -> str:
        """The module-qualified name of something in this module's scope: `module2.t`."""
        return f"{self.path}.{name}" if self.path else name

    def all_modules(self) -> list[ModuleSpec]:
        """This module and every composite module below it, parents first."""
        result = [self]
        for child in self.modules:
            result += child.all_modules()
        return result


@dataclass(frozen=True)
class BackwardSpec:
    """One `backward:` item: a tensor's `.backward()`, possibly with a gradient, several times.

    `zero_grad` empties every leaf's `.grad` before it; `expect_error` is part of the message
    torch is expected to raise (a lesson about an error), None when it must succeed.
    """

    of: str
    gradient: TensorInit | None
    retain_graph: bool
    times: int
    zero_grad_between: bool
    where: Location = field(compare=False)
    zero_grad: bool = False
    expect_error: str | None = None


@dataclass(frozen=True)
class GradOutputs:
    """`grad_outputs` of a `torch.autograd.grad` call: ones, a one-hot column, or a literal."""

    kind: Literal["ones", "one_hot", "value"]
    column: int | None = None
    value: TensorInit | None = None


@dataclass(frozen=True)
class GradCall:
    """A `torch.autograd.grad(of, wrt, grad_outputs=...)` call."""

    of: str
    wrt: tuple[str, ...]
    grad_outputs: GradOutputs | None
    retain_graph: bool
    where: Location = field(compare=False)
    expect_error: str | None = None


InterventionHook = Literal["backward", "full_backward", "full_backward_pre", "tensor"]
ActionKind = Literal["normalize", "scale", "zero", "clip", "wrong_length", "wrong_shape"]


@dataclass(frozen=True)
class Intervention:
    """A hook that returns a replacement gradient, chosen from a fixed catalogue of actions.

    `wrong_length` and `wrong_shape` return what torch refuses, to show its message and the rule;
    `expect_error` is then part of that message.
    """

    hook: InterventionHook
    target: str
    action: ActionKind
    factor: float | None
    min: float | None
    max: float | None
    where: Location = field(compare=False)
    expect_error: str | None = None


@dataclass(frozen=True)
class Capture:
    """A forward hook that stores a module's output under a name (the CAM pattern).

    `remove_after`: the hook's handle is removed after that many forward calls (None: never).
    """

    name: str
    module: str
    where: Location = field(compare=False)
    remove_after: int | None = None


@dataclass(frozen=True)
class TensorInfo:
    """What the checker inferred about a named tensor, without running anything."""

    name: str
    shape: Shape
    floating: bool
    requires_grad: bool


LossKind = Literal["sum", "mean"]


@dataclass(frozen=True)
class PythonModel:
    """What makes a ModelSpec stand for the user's own Python model (`file.py:make_model`)
    rather than YAML: where it came from, and how its output becomes the scalar `loss` that is
    backpropagated. Its tensors are named by module path and op (`encoder.0:addmm`).
    `output` is the path of the part of the output the loss is taken of (`output_path`; empty:
    the whole output)."""

    target: str
    loss: LossKind
    output: tuple[str, ...] = ()


WrapKind = Literal["ddp", "fsdp"]


@dataclass(frozen=True)
class DDPOptions:
    """The DistributedDataParallel options a spec may set; torch's defaults where it does not.
    `no_sync`: the pass's forward and backward run inside `ddp.no_sync()` (no all-reduce)."""

    find_unused_parameters: bool = False
    static_graph: bool = False
    gradient_as_bucket_view: bool = False
    bucket_cap_mb: float | None = None  # None: torch's default (25 MB)
    no_sync: bool = False


@dataclass(frozen=True)
class RankInputs:
    """One rank's own values for some of the spec's inputs, by input name; the inputs it does
    not name are made as the spec makes them. Each has its input's shape and dtype, and is
    written (a literal, zeros or ones: language/distributed.py says why never drawn). `where`
    is the rank's mapping in the spec file."""

    values: tuple[tuple[str, TensorInit], ...]
    where: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class DistributedSpec:
    """How the spec runs under `walk --ranks N`: what differs per rank and how it is wrapped.

    `inputs` gives each rank its own values (rank by rank; empty: every rank has the spec's);
    `split` names inputs whose batch (dim 0) is cut into equal parts, one per rank. `ranks` is
    the number of ranks the spec is written for (None: one per `inputs` item when given, else
    whatever --ranks says, 2 by default); `where` is the section's place, where the runner's
    errors about it point (ranks.py)."""

    ranks: int | None
    wrap: WrapKind
    inputs: tuple[RankInputs, ...]
    split: tuple[str, ...]
    ddp: DDPOptions
    where: Location = field(compare=False)

    def written_ranks(self) -> int | None:
        """The number of ranks the section itself fixes: `ranks`, or one per `inputs` item
        (None: the section fits any number, and --ranks says)."""
        return self.ranks if self.ranks is not None else (len(self.inputs) or None)


@dataclass(frozen=True)
class ModelSpec:
    """A whole spec, loaded and checked (or made for a Python model: `python` says which)."""

    name: str
    about: str
    file: str
    seed: int
    dtype: DType
    inputs: tuple[InputSpec, ...]
    root: ModuleSpec
    backwards: tuple[BackwardSpec, ...]
    grads: tuple[GradCall, ...]
    interventions: tuple[Intervention, ...]
    captures: tuple[Capture, ...]
    tensors: tuple[TensorInfo, ...] = ()
    python: PythonModel | None = None
    distributed: DistributedSpec | None = None

    def tensor(self, name: str) -> TensorInfo | None:
        for info in self.tensors:
            if info.name == name:
                return info
        return None

    def counts(self) -> SpecCounts:
        modules = self.root.all_modules()
        parameter_names = {param for module in modules for param in
                           [module.qualify(p.name) for p in module.params]}
        for module in modules:
            for layer in module.layers:
                prefix = module.qualify(layer.name) + "."
                parameter_names |= {info.name for info in self.tensors
                                    if info.name.startswith(prefix)}
        parameters = [info for info in self.tensors if info.name in parameter_names]
        return SpecCounts(
            modules=len(modules) - 1,
            layers=sum(len(module.layers) for module in modules),
            parameters=len(parameters),
            parameter_values=sum(numel(info.shape) for info in parameters),
            steps=sum(len(module.steps) for module in modules),
        )


@dataclass(frozen=True)
class SpecCounts:
    """How big a spec is, for `validate`'s one-line summary."""

    modules: int
    layers: int
    parameters: int
    parameter_values: int
    steps: int

