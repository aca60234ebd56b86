"""What backward starts from for a Python model: its output taken apart, the selected part, the
scalar `loss`.

A model may return a tensor, or tuples, lists, dicts, namedtuples and dataclasses of them,
nested (`nn.LSTM`: `(out, (h, c))`). `tensor_parts` lists every tensor in it with its path;
`select` follows an `OutputPath` (`--loss-of 1.0`, `explain(output="logits")`) to a tensor or a
sub-structure; `loss_of` reduces what was selected: each floating tensor in it that requires
grad, summed (`--loss sum`) or averaged (`--loss mean`), and those added up. Without a path
the whole output is selected: one tensor's sum, as a training loop would write it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from gradexplain.errors import ModelRunError
from gradexplain.output_path import OutputPath, part_name, path_text, python_form


class OutputPathError(ModelRunError):
    """A path that does not lead into the model's output, or leads to nothing differentiable:
    one line naming the path, where it stopped and the paths there are (exit 2)."""


def _children(value: Any) -> list[tuple[str, Any]] | None:
    """The parts of a container, by the path part that reaches each; None for a leaf."""
    if isinstance(value, Mapping):
        return [(str(key), item) for key, item in value.items()]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple: by field name
        return list(zip(value._fields, value, strict=True))
    if isinstance(value, (tuple, list)):
        return [(str(index), item) for index, item in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(item.name, getattr(value, item.name)) for item in dataclasses.fields(value)]
    return None


# The deepest a model's output may nest containers: far beyond any real model's (an LSTM's is 2),
# and well within Python's recursion limit, which a deeper one would exceed.
OUTPUT_NESTING = 100


def tensor_parts(value: Any, path: OutputPath = (),
                 within: tuple[int, ...] = ()) -> Iterator[tuple[OutputPath, torch.Tensor]]:
    """Every tensor in `value` with its path, depth first in the container's own order.
    `within`: the ids of the containers it lies in, so that one holding itself is refused."""
    if isinstance(value, torch.Tensor):
        yield path, value
        return
    children = _children(value)
    if not children:
        return
    if id(value) in within:
        raise ModelRunError(f"the model's output holds itself: {python_form(path)} "
                            f"is {_kind(value)} that contains itself; return tensors in "
                            "containers without cycles")
    if len(path) >= OUTPUT_NESTING:
        raise ModelRunError(f"the model's output nests containers more than {OUTPUT_NESTING} "
                            "deep; return its tensors less deeply nested")
    for part, item in children:
        yield from tensor_parts(item, (*path, part), (*within, id(value)))


def select(output: Any, path: OutputPath, target: str) -> Any:
    """The part of `output` at `path`. A namedtuple's fields answer to their index too, and a
    dict's key with dots in it (`"a.b"`, which `path_text` shows as it is) to the parts it
    was split into, when no key is the first part alone."""
    found = output
    depth = 0
    while depth < len(path):
        part = path[depth]
        children = _children(found)
        if children is None:
            where = python_form(path[:depth])
            raise OutputPathError(_bad_path(
                output, path, target, f"{where} is {_kind(found)}, it has no parts"))
        keys = dict(children)
        dotted = next((end for end in range(len(path), depth + 1, -1)
                       if ".".join(path[depth:end]) in keys), None)
        if part in keys:
            found = keys[part]
        elif isinstance(found, tuple) and part.isdigit() and int(part) < len(found):
            found = found[int(part)]  # a namedtuple's field by position
        elif isinstance(found, Mapping) and dotted is not None:
            found = keys[".".join(path[depth:dotted])]
            depth = dotted
            continue
        else:
            where = python_form(path[:depth])
            shown = ", ".join(name for name, _ in children[:12])
            raise OutputPathError(_bad_path(
                output, path, target, f"{where} ({_kind(found)}) has no {part!r}, only {shown}"))
        depth += 1
    return found


def _bad_path(output: Any, path: OutputPath, target: str, why: str) -> str:
    return f"{target}: output path {path_text(path)!r}: {why}; {_choices(output)}"


def _choices(output: Any) -> str:
    paths = [path_text(path) for path, _ in tensor_parts(output)]
    if not paths or paths == [""]:
        return "the model returns a single tensor: leave out the output path"
    shown = ", ".join(paths[:20]) + (", ..." if len(paths) > 20 else "")
    return f"the output's tensors are at {shown}"


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "a tensor"
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _differentiable(value: Any) -> list[torch.Tensor]:
    return [tensor for _, tensor in tensor_parts(value)
            if tensor.requires_grad and tensor.is_floating_point()]


def python_results(output: Any, path: OutputPath, loss: str, target: str) -> dict[str, Any]:
    """A Python model's results by name (`records.names`-safe, see `part_name`) and `loss`,
    the scalar backpropagated: `loss` of each differentiable tensor at `path`, added up."""
    parts = list(tensor_parts(output))
    if not parts:
        raise ModelRunError(f"{target}: the model returned {_kind(output)} with no tensor in it; "
                            "gradexplain needs a tensor to backpropagate from")
    returned: dict[str, Any] = {}
    for part_path, tensor in parts:
        name = part_name(part_path)
        while name in returned:  # two keys that differ only in non-word characters
            name += "_"
        returned[name] = tensor
    selected = select(output, path, target)
    differentiable = _differentiable(selected)
    if not differentiable:
        whole = _differentiable(output)
        if not whole:
            raise ModelRunError(f"{target}: the model's output does not require grad: nothing "
                                "to backpropagate (are its parameters frozen, its inputs "
                                "integers or without grad, or its forward under no_grad?)")
        usable = ", ".join(path_text(part_path) for part_path, tensor in parts
                           if tensor.requires_grad and tensor.is_floating_point())
        raise OutputPathError(f"{target}: output path {path_text(path)!r}: "
                              f"{python_form(path)} has no floating tensor that requires grad; "
                              f"the ones that do are at {usable}")
    reduced = [item.sum() if loss == "sum" else item.mean() for item in differentiable]
    if len(reduced) == 1:
        returned["loss"] = reduced[0]
    elif len({item.dtype for item in reduced}) == 1:
        returned["loss"] = torch.stack(reduced).sum()
    else:  # float32 and float64 parts: stack would refuse them
        returned["loss"] = sum(reduced[1:], reduced[0])
    return returned


__all__ = ["OutputPathError", "python_results", "select", "tensor_parts"]
