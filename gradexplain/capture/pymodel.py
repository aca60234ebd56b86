"""Python models: the user's own `nn.Module`, from the command line or the API, as a ModelSpec.

`gradexplain walk path/to/file.py:make_model --input 4x3` (or `pkg.module:attr`) loads the
attribute, an `nn.Module` or a zero-argument callable returning one; this runs the user's code,
by their explicit choice (a YAML spec never does). Everything after that is the YAML pipeline:
`python_spec` makes the ModelSpec the tracer, labeller and renderers read (inputs by the names
the model's forward gives them, one backward of `loss`), and `PythonSource.build` makes the
identical fresh builds the two passes and the check run need: deep copies of the model as
loaded, and the same input tensors.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import inspect
import io
import math
import pickle
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradexplain.capture.build import Built
from gradexplain.capture.copier import deep_copy
from gradexplain.capture.pool import ParameterPool
from gradexplain.capture.usercode import (
    caught,
    described,
    kind_of,
    message_of,
    safe_repr,
    user_frame,
    with_place,
)
from gradexplain.capture.values import dtype_name
from gradexplain.errors import BadInput, Location, first_line
from gradexplain.language.model import (
    BackwardSpec,
    DType,
    InputSpec,
    LossKind,
    ModelSpec,
    ModuleSpec,
    PythonModel,
    TensorInit,
)
from gradexplain.output_path import WHOLE, OutputPath, python_form
from gradexplain.target import TARGET, is_python_target, working_directory_importable

# Bounds on what --input may ask for: a typo like 4000x3000x3 should be an error, not a hang.
MAX_INPUT_ELEMENTS = 10_000_000
INT_HIGH = 10  # integer inputs (token ids) are drawn from 0..9; --inputs FILE.pt for real ones

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "int64": torch.int64,
}


class ModelLoadError(BadInput):
    """A Python model that cannot be loaded, called or fed: one line saying what to fix."""


@dataclass(frozen=True)
class InputShape:
    """One `--input`: a shape, a dtype and whether it requires grad (`4x3`, `2x5:int64`,
    `4x3:nograd`). A floating input requires grad unless told `nograd`; an integer one never."""

    shape: tuple[int, ...]
    dtype: DType = "float32"
    requires_grad: bool = True

    @property
    def text(self) -> str:
        dims = "x".join(str(size) for size in self.shape) or "scalar"
        text = dims if self.dtype == "float32" else f"{dims}:{self.dtype}"
        return text if self.requires_grad or self.dtype == "int64" else f"{text}:{NO_GRAD}"


NO_GRAD = "nograd"  # the --input flag for an input that does not require grad


def parse_input(text: str) -> InputShape:
    """`4x3` -> (4, 3); `2x5:int64`; `4x3:nograd`, `4x3:float64:nograd`; `scalar` for a 0-d
    tensor. ModelLoadError otherwise."""
    dims, *flags = text.strip().split(":")
    dtypes = [flag for flag in flags if flag != NO_GRAD]
    unknown = [item for item in dtypes if item not in _DTYPES]
    if unknown:
        raise ModelLoadError(f"--input {text!r}: dtype {unknown[0]!r} is not one of "
                             f"{', '.join(_DTYPES)} (or {NO_GRAD}: no grad for this input)")
    if len(dtypes) > 1 or flags.count(NO_GRAD) > 1:
        raise ModelLoadError(f"--input {text!r}: after the shape, expected a dtype and/or "
                             f"{NO_GRAD}, each once, joined by ':'")
    dtype = dtypes[0] if dtypes else "float32"
    requires_grad = NO_GRAD not in flags and dtype != "int64"
    if dims == "scalar":
        return InputShape((), dtype, requires_grad)  # type: ignore[arg-type]
    parts = dims.lower().split("x")
    if not all(part.isdigit() and int(part) > 0 for part in parts):
        raise ModelLoadError(f"--input {text!r}: expected a shape such as 4x3 (positive sizes "
                             f"joined by x), optionally with :float64 or :int64, and :{NO_GRAD}")
    shape = tuple(int(part) for part in parts)
    check_elements(f"--input {text!r}", math.prod(shape))
    return InputShape(shape, dtype, requires_grad)  # type: ignore[arg-type]


def check_elements(what: str, elements: int, holder: str = "") -> None:
    """An input's elements within MAX_INPUT_ELEMENTS: the error names `what` (the option),
    and `holder` (`the tensor has `) says whose elements they are, when not the option's."""
    if elements > MAX_INPUT_ELEMENTS:
        raise ModelLoadError(f"{what}: {holder}{elements:,} elements, more than the "
                             f"{MAX_INPUT_ELEMENTS:,} gradexplain accepts")


def load_target(target: str) -> nn.Module:
    """The module `target` names: the attribute itself, or what calling it returns."""
    match = TARGET.match(target)
    if match is None or not is_python_target(target):
        raise ModelLoadError(f"{target!r}: expected FILE.py:NAME or package.module:NAME")
    where, attr = match.group("where"), match.group("attr")
    module = _import_file(where) if where.endswith(".py") else _import_module(where)
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            # What the user most likely meant: modules and functions defined in that file.
            known = sorted(name for name, value in vars(module).items()
                           if not name.startswith("_") and (isinstance(value, nn.Module) or (
                               (inspect.isfunction(value) or (
                                   inspect.isclass(value) and issubclass(value, nn.Module)))
                               and value.__module__ == module.__name__)))
            more = f", and {len(known) - _NAMES_SHOWN:,} more" if len(known) > _NAMES_SHOWN else ""
            hint = f" (it has: {', '.join(known[:_NAMES_SHOWN])}{more})" if known else ""
            raise ModelLoadError(f"{target}: {where} has no attribute {attr!r}{hint}")
        found = getattr(found, part)
    return as_module(found, target)


_NAMES_SHOWN = 8  # the most names a file's missing-attribute error lists


def as_module(found: Any, target: str, seed: int = 0) -> nn.Module:
    """`found` if it is an nn.Module, else what calling it with no arguments returns, called
    with torch's RNG seeded (so its random init is the same every time; the caller's RNG is
    left as it was)."""
    if isinstance(found, nn.Module):
        return found
    if (isinstance(found, type) and not issubclass(found, nn.Module)) or not callable(found):
        raise ModelLoadError(f"{target}: {kind_of(found)}, not an "
                             "nn.Module or a function returning one")
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            made = found()
    except TypeError as error:
        raise ModelLoadError(f"{target}: calling it with no arguments failed "
                             f"({message_of(error)}); name an nn.Module or a zero-argument "
                             "function that returns one") from error
    except BaseException as error:  # sys.exit() too: the factory's exit is not ours to pass on
        if not caught(error):
            raise
        raise ModelLoadError(with_place(f"{target}: calling it {described(error)}",
                                        error)) from error
    if not isinstance(made, nn.Module):
        if inspect.iscoroutine(made) or inspect.isgenerator(made):
            made.close()  # never run: closed, so that Python does not warn it was never awaited
        raise ModelLoadError(f"{target}: calling it returned "
                             f"{kind_of(made)}, not an nn.Module")
    return made


def _import_file(where: str) -> Any:
    from gradexplain.files import UnreadableFile, regular_size

    path = Path(where)
    try:
        regular_size(path, sys.maxsize, where)  # a folder, a FIFO, a symlink loop: said so
    except UnreadableFile as problem:
        reason = "no such file" if problem.kind == "missing" else problem.reason
        raise ModelLoadError(f"{where}: {reason}") from None
    # A name of its own per file, the same in every process (hash() of a str is not).
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"gradexplain_user_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelLoadError(f"{where}: cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    # The file may import its neighbours, as it would when run as a script.
    sys.path.insert(0, str(path.resolve().parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as error:  # sys.exit() at import too
        sys.modules.pop(name, None)
        if not caught(error):
            raise
        raise ModelLoadError(with_place(f"{where}: running it {described(error)}",
                                        error)) from error
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def _import_module(where: str) -> Any:
    try:
        with working_directory_importable():
            return importlib.import_module(where)
    except ModuleNotFoundError as error:
        raise ModelLoadError(f"{where}: cannot import it ({message_of(error)})") from error
    except BaseException as error:  # sys.exit() at import too
        if not caught(error):
            raise
        raise ModelLoadError(with_place(f"{where}: importing it {described(error)}",
                                        error)) from error


def load_inputs(path: Path) -> tuple[torch.Tensor, ...]:
    """The tensors in a `torch.save`d file: one tensor, or a list or tuple of them, each a
    plain dense CPU tensor, within MAX_INPUT_ELEMENTS each and in all. The bound is on their
    shapes, checked before anything copies them: a 1 KB file can hold an expanded view of
    10**9 elements that takes no memory until it is copied."""
    from gradexplain.files import MAX_INPUTS_BYTES, UnreadableFile, read_regular

    try:
        data = read_regular(path, MAX_INPUTS_BYTES)
    except UnreadableFile as problem:
        reason = "no such file" if problem.kind == "missing" else problem.reason
        raise ModelLoadError(f"--inputs {path}: {reason}") from None
    try:
        # torch warns while it loads some files (quantized tensors, typed storages): about
        # torch's own deprecations, nothing the user can act on; what is wrong with the file
        # is said below, in one line.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:
        raise ModelLoadError(f"--inputs {path}: {_unloadable(data, error)}") from error
    items = (loaded,) if isinstance(loaded, torch.Tensor) else loaded
    if not isinstance(items, (tuple, list)):
        raise ModelLoadError(f"--inputs {path}: expected a tensor or a list of tensors, found "
                             f"{kind_of(loaded)}")
    if not items:
        raise ModelLoadError(f"--inputs {path}: the {type(loaded).__name__} in it is empty; "
                             "save one tensor per input of the model's forward")
    stray = next((index for index, item in enumerate(items)
                  if not isinstance(item, torch.Tensor)), None)
    if stray is not None:
        raise ModelLoadError(f"--inputs {path}: item {stray} of the {type(loaded).__name__} "
                             f"in it is {kind_of(items[stray])}, not a "
                             "tensor; save tensors only")
    for index, tensor in enumerate(items):
        which = "the tensor" if len(items) == 1 else f"tensor {index} of {len(items):,}"
        kind = _unusual_kind(tensor)
        if kind is not None:
            raise ModelLoadError(f"--inputs {path}: {which} is {kind}; save plain dense CPU "
                                 "tensors")
        check_elements(f"--inputs {path}", tensor.numel(), f"{which} has ")
    check_elements(f"--inputs {path}", sum(tensor.numel() for tensor in items),
                   f"its {len(items):,} tensors together have ")
    return tuple(items)


def _unusual_kind(tensor: torch.Tensor) -> str | None:
    """What a loaded tensor is, when it is not a plain dense CPU tensor (which the hooks,
    copies and checks all take); None when it is one."""
    if tensor.is_nested:
        return "a nested tensor"
    if tensor.is_quantized:
        return "a quantized tensor"
    if tensor.layout != torch.strided:
        return f"a {str(tensor.layout).removeprefix('torch.')} tensor"
    if tensor.device.type != "cpu":
        return f"on the {tensor.device.type} device"
    return None


def _forward_params(model: nn.Module) -> list[inspect.Parameter] | None:
    """The parameters of the model's forward, or None when Python cannot say."""
    try:
        return list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return None


def _positional(param: inspect.Parameter) -> bool:
    return param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)


def input_names(model: nn.Module, count: int) -> tuple[str, ...]:
    """The forward's own parameter names for its positional inputs (`x`, `images`), else
    `input.0`, `input.1`, ..."""
    named = [param.name for param in _forward_params(model) or [] if _positional(param)]
    reserved = {"output", "loss"}
    if len(named) >= count and not reserved & set(named[:count]) and all(
            "." not in name for name in named[:count]):
        return tuple(named[:count])
    return ("input",) if count == 1 else tuple(f"input.{index}" for index in range(count))


def required_inputs(model: nn.Module) -> int | None:
    """How many positional arguments the model's forward needs, or None if it takes *args."""
    params = _forward_params(model)
    if params is None or any(param.kind is param.VAR_POSITIONAL for param in params):
        return None
    return sum(1 for param in params if param.default is param.empty and _positional(param))


@dataclass(frozen=True)
class PythonSource:
    """A loaded model and its inputs, kept pristine; `build()` hands out identical copies, each
    input requiring grad as `spec.inputs` says."""

    spec: ModelSpec
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    description: str
    # The parameters' values, copied once and shared by the builds while no pass changes them.
    pool: ParameterPool = field(default_factory=ParameterPool, compare=False, repr=False)

    def build(self) -> Built:
        try:
            model = deep_copy(self.model, self.pool.memo(self.model))
        except RuntimeError as error:
            if user_frame(error) is not None:
                raise  # the user's own __deepcopy__: blamed on the model (usercode)
            # torch's refusal (old weight_norm and prune keep a non-leaf tensor as an
            # attribute): no pass can run without its own copy, so say what torch said.
            raise ModelLoadError(
                f"{self.spec.python.target if self.spec.python else self.spec.name}: torch "
                f"refused to deep-copy the model, and each pass runs on a deep copy of it: "
                f"{first_line(error)}") from error
        for parameter in model.parameters():
            parameter.grad = None
        _copy_tensor_hooks(self.model, model)
        inputs = tuple(tensor.detach().clone().requires_grad_(spec.requires_grad)
                       for tensor, spec in zip(self.inputs, self.spec.inputs, strict=True))
        return Built(self.spec, model, inputs)


def _copy_tensor_hooks(original: nn.Module, copied: nn.Module) -> None:
    """The user's tensor hooks and post-accumulate-grad hooks on parameters, registered again
    on the copy (`Parameter.__deepcopy__` drops them; module hooks come with the copy). They
    run, are recorded or suspended as the pass needs: `capture/user_hooks.py`."""
    parameters: dict[str, Any] = dict(copied.named_parameters())  # torch's hook API is untyped
    for name, parameter in original.named_parameters():
        target = parameters.get(name)
        if target is None or not target.requires_grad:
            continue
        for hook in (parameter._backward_hooks or {}).values():
            target.register_hook(hook)
        for hook in (getattr(parameter, "_post_accumulate_grad_hooks", None) or {}).values():
            target.register_post_accumulate_grad_hook(hook)


def python_source(model: nn.Module, inputs: Sequence[torch.Tensor], target: str,
                  loss: LossKind = "sum", command: str | None = None,
                  output: OutputPath = WHOLE,
                  requires_grad: Sequence[bool] | None = None) -> PythonSource:
    """The source of a Python model run: its spec, the model and inputs, and a description of
    the model for reports (`print(model)`, the shapes, the loss). `output` is the part of the
    model's output the loss is taken of (`output_path`); `requires_grad` says, input by input,
    which inputs require grad (None: the floating ones)."""
    if not inputs:
        raise ModelLoadError(f"{target}: no inputs; give --input SHAPE for each of the "
                             "model's forward arguments, or --inputs FILE.pt")
    grads = (tuple(tensor.is_floating_point() for tensor in inputs) if requires_grad is None
             else tuple(requires_grad))
    if len(grads) != len(inputs):
        raise ModelLoadError(f"{target}: requires_grad has {len(grads)} entries for "
                             f"{len(inputs)} inputs")
    for tensor, wanted in zip(inputs, grads, strict=True):
        if wanted and not tensor.is_floating_point():
            raise ModelLoadError(f"{target}: an input of dtype {dtype_name(tensor)} cannot "
                                 "require grad (only floating tensors can)")
    _refuse_script(model, target)
    model = _initialised(model, inputs)
    names = input_names(model, len(inputs))
    where = Location(target)
    specs = tuple(
        InputSpec(name, TensorInit("randn", tuple(tensor.shape), _spec_dtype(tensor)),
                  wanted, where)
        for name, tensor, wanted in zip(names, inputs, grads, strict=True))
    root = ModuleSpec("", "", names, (), (), (), (), ("output",), where)
    backward = BackwardSpec("loss", None, False, 1, False, where)
    selected = python_form(output)
    about = (f"{type(model).__name__} from {target}: loss = {loss}({selected}), "
             "backpropagated with loss.backward()")
    spec = ModelSpec(_display_name(target), about, target, 0, "float32", specs, root,
                     (backward,), (), (), (), (), PythonModel(target, loss, output))
    shapes = ", ".join(
        f"{name}: {tuple(tensor.shape)} {dtype_name(tensor)}{'' if wanted else ' (no grad)'}"
        for name, tensor, wanted in zip(names, inputs, grads, strict=True))
    lines = [f"# {command}" if command else f"# {target}", f"# inputs: {shapes}",
             f"# loss = {selected}.{loss}(); loss.backward()", safe_repr(model)]
    return PythonSource(spec, model, tuple(inputs), "\n".join(lines) + "\n")


# How a file torch.save wrote begins: a zip archive (torch's format since 1.6), or a pickle
# (protocol 2 and later: the older format).
_ZIP_START, _PICKLE_START = b"PK\x03\x04", b"\x80"


def _unloadable(data: bytes, error: Exception) -> str:
    """Why `torch.load(weights_only=True)` could not load an `--inputs` file, read from the
    file itself rather than from torch's words (whose advice, to load it with weights_only
    off, would run the file's code: gradexplain never does)."""
    if not data:
        return ("the file is empty: save the inputs with torch.save(x, path), or "
                "torch.save([x, y], path) for several")
    if not data.startswith((_ZIP_START, _PICKLE_START)):
        return ("not a file torch.save wrote (it begins as neither a zip archive nor a "
                "pickle): save the inputs with torch.save(x, path)")
    if isinstance(error, pickle.UnpicklingError):
        return ("it holds something other than tensors, which torch loads only by running "
                "code from the file (gradexplain never does): save a tensor, or a list or "
                "tuple of tensors")
    return (f"torch could not read it as a file torch.save wrote (cut short or damaged?): "
            f"{first_line(error)}")


def _initialised(model: nn.Module, inputs: Sequence[torch.Tensor]) -> nn.Module:
    """The model, or for one with lazy modules (LazyLinear, LazyConv2d) a copy after one
    hook-free forward on the inputs, with torch's RNG seeded: a lazy module has no weights
    until its first call, and a hook cannot be put on a parameter that is not there yet. The
    user's model is never changed (the API promises it), and buffers that had values (a
    BatchNorm's running statistics) get them back: the walk's first forward is the first."""
    if not any(isinstance(parameter, nn.parameter.UninitializedParameter)
               for parameter in model.parameters()):
        return model
    ready = copy.deepcopy(model)
    kept = {name: buffer.clone() for name, buffer in ready.named_buffers()
            if not isinstance(buffer, nn.parameter.UninitializedBuffer)}
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        ready(*inputs)
        for name, buffer in ready.named_buffers():
            if name in kept:
                buffer.copy_(kept[name])
    return ready


def _refuse_script(model: nn.Module, target: str) -> None:
    """A TorchScript module (torch.jit.script or trace) anywhere in the model: torch refuses
    forward hooks on it, and every pass hooks every module's forward."""
    for path, module in model.named_modules():
        if isinstance(module, torch.jit.ScriptModule):
            where = f"{path} is" if path else "the model is"
            raise ModelLoadError(
                f"{target}: {where} a TorchScript module ({type(module).__name__}); torch "
                "refuses forward hooks on ScriptModules and gradexplain hooks every module's "
                "forward: give the nn.Module as it was before torch.jit.script or trace")


def _spec_dtype(tensor: torch.Tensor) -> DType:
    """The spec language's dtype for an input (its own dtype is what builds use, and what the
    description says: `dtype_name`)."""
    name = dtype_name(tensor)
    return name if name in _DTYPES else "float32"  # type: ignore[return-value]


def _display_name(target: str) -> str:
    """`models.py:make_mlp` and `pkg.models:make_mlp` -> `models:make_mlp`; an API title as is."""
    if not is_python_target(target):
        return target
    where, _, attr = target.rpartition(":")
    stem = Path(where).stem if where.endswith(".py") else where.rsplit(".", 1)[-1]
    return f"{stem}:{attr}"


def random_inputs(shapes: Sequence[InputShape], seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Seeded randn per shape (integers: 0..INT_HIGH-1), the caller's RNG left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return tuple(
            torch.randint(0, INT_HIGH, item.shape) if item.dtype == "int64"
            else torch.randn(item.shape, dtype=_DTYPES[item.dtype])
            for item in shapes)


def load_model(target: str) -> nn.Module:
    """Load `target`; a factory is called with torch's RNG seeded (see `as_module`), so names
    and values are the same on every run. Importing the file is not seeded: what it draws at
    import is its own business (the caller's RNG is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        return load_target(target)


def check_arity(model: nn.Module, count: int, target: str) -> None:
    """Too few inputs for the forward: say how many it takes, before anything runs."""
    needed = required_inputs(model)
    if needed is not None and count < needed:
        names = input_names(model, needed)
        raise ModelLoadError(f"{target}: its forward takes {needed} input(s) "
                             f"({', '.join(names)}), {count} given; add --input SHAPE for each")


__all__ = ["InputShape", "ModelLoadError", "PythonSource", "check_arity", "check_elements",
           "is_python_target", "load_inputs", "load_model", "parse_input", "python_source",
           "random_inputs"]
