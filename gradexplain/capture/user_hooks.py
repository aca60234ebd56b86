"""The user's own hooks on a Python model: found on each build, kept and recorded, and suspended
only where torch cannot combine them with what a pass registers.

A model often comes with hooks (that is why its user asks what they receive). A build is a deep
copy of the model, so it carries the module hooks; `pymodel` copies the parameters' tensor hooks
(which `Parameter.__deepcopy__` drops). `user_hooks(model, purpose, calls)` then, for the time of
one pass:

- wraps every hook of the build in a recorder that calls the original and reports what it
  received, what it returned and whether that changed the value (`calls.user_call`);
- suspends what torch cannot combine with the pass's own hooks: torch refuses legacy and full
  backward hooks on one module, so the legacy pass suspends the user's full backward hooks
  (and full pre-hooks, whose identity wrappers would move the legacy hooks off the module's last
  op) and the full pass the user's legacy ones. The module's `_is_full_backward_hook` flag is
  sticky (it stays after the handle is removed), so it is reset for the pass;
- for the hook-free check run (`purpose="replay"`) suspends every backward-phase hook, so the
  check computes true derivatives, and keeps forward hooks as they are: they are part of what
  the model computes;
- suspends global module hooks (`torch.nn.modules.module.register_module_*`) whatever the
  purpose: they would hook every module of every build, and a global backward hook of one kind
  makes torch refuse the other kind on every module;
- catches the tensor hooks and post-accumulate-grad hooks the model registers while the pass
  runs (a forward that calls `h.register_hook(lambda g: -g)`, a gradient reversal): no build
  carries them, each forward registers them anew. In a pass they are recorded as the ones found
  on the build are; in the check run they are not registered, or the check would compute the
  hooked gradients and confirm them as true derivatives.

Everything is put back on exit, dict for dict and flag for flag (the global ones too).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, Protocol

import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch.utils.hooks import RemovableHandle

from gradexplain.records.paths import module_title
from gradexplain.records.trace import Arg, HookKind, UserHook

Purpose = Literal["legacy", "full", "replay"]
Hook = Callable[..., Any]


class UserCalls(Protocol):
    """What records the calls of the user's hooks (the tracer's recorder)."""

    def user_args(self, prefix: str, values: Any) -> list[Arg]:
        """The values as recorded arguments `prefix[i]` (one `prefix` for a lone non-tuple)."""

    def user_call(self, hook: HookKind, target: str, function: str, received: list[Arg],
                  returned: list[Arg] | None, changed: bool, tensor: torch.Tensor | None) -> None:
        """Record one call; `tensor` is the tensor a tensor hook is on."""

    def tensor_name(self, tensor: torch.Tensor) -> str | None:
        """The walk's name for a tensor, if the pass has named it yet."""

    def hold(self, tensor: torch.Tensor) -> Callable[[], torch.Tensor | None]:
        """The tensor, held by the recorder for its pass (None once the pass is over): a
        hook on a tensor the graph holds must not hold the tensor itself (a cycle through
        torch's nodes, which Python's collector cannot see)."""


# Makes the wrapper that stands in for the user's hook (key, hook) and records into `calls`.
Wrapper = Callable[[int, Hook, UserCalls], Hook]

GLOBAL_WHY = ("gradexplain runs your model without global module hooks: they would hook every "
              "module of every build, and torch refuses backward hooks of the other kind on "
              "every module while one is registered; they are back in place afterwards")


def function_name(hook: Hook) -> str:
    """The user's function as they wrote it: `log_grads`, `<lambda>`, `Logger.__call__`."""
    name = getattr(hook, "__name__", None)
    return name if isinstance(name, str) else f"{type(hook).__name__}.__call__"


class _Saved:
    """Hook dicts and flags as they were, put back on exit (in place: torch holds the dicts)."""

    def __init__(self) -> None:
        self.dicts: list[tuple[dict[int, Any], list[tuple[int, Any]]]] = []
        self.flags: list[tuple[nn.Module, bool | None]] = []

    def keep(self, hooks: dict[int, Any]) -> None:
        if not any(hooks is kept for kept, _ in self.dicts):
            self.dicts.append((hooks, list(hooks.items())))

    def restore(self) -> None:
        for hooks, items in reversed(self.dicts):
            hooks.clear()
            hooks.update(items)
        for module, flag in reversed(self.flags):
            module._is_full_backward_hook = flag


@contextmanager
def user_hooks(model: nn.Module, purpose: Purpose,
               calls: UserCalls | None) -> Iterator[list[UserHook]]:
    """Within the block the build's user hooks are recorded (`calls`) or suspended as
    `purpose` needs; the list yielded says what was found and what ran."""
    saved = _Saved()
    found: list[UserHook] = []
    globals_before = _suspend_globals(found)
    try:
        for path, module in model.named_modules():
            _module_hooks(path, module, purpose, calls, saved, found)
        for name, parameter in model.named_parameters():
            _tensor_hooks(name, parameter, purpose, calls, saved, found)
        with _registered_in_the_pass(purpose, calls, found):
            yield found
    finally:
        saved.restore()
        _restore_globals(globals_before)


# --- modules ------------------------------------------------------------------------------------


def _module_hooks(path: str, module: nn.Module, purpose: Purpose, calls: UserCalls | None,
                  saved: _Saved, found: list[UserHook]) -> None:
    if (module._is_full_backward_hook is None and not module._forward_pre_hooks
            and not module._forward_hooks and not module._backward_hooks
            and not module._backward_pre_hooks):
        return  # nothing to wrap, suspend or reset: most modules, at every pass
    title = module_title(path)
    pre_kwargs, forward_kwargs = (module._forward_pre_hooks_with_kwargs,
                                  module._forward_hooks_with_kwargs)
    _wrap(module._forward_pre_hooks, "forward_pre", path, calls, saved, found,
          lambda key, hook, into: _forward_pre(hook, path, key in pre_kwargs, into))
    _wrap(module._forward_hooks, "forward", path, calls, saved, found,
          lambda key, hook, into: _forward(hook, path, key in forward_kwargs, into))
    full = module._is_full_backward_hook
    kind: HookKind = "full_backward" if full else "backward"
    refused = {"legacy": full is True, "full": full is False, "replay": True}[purpose]
    if refused:
        why = _refused_why(kind, title, purpose)
        _suspend(module._backward_hooks, kind, path, why, saved, found)
        saved.flags.append((module, full))
        module._is_full_backward_hook = None  # sticky: set even when no hook is left
    else:
        _wrap(module._backward_hooks, kind, path, calls, saved, found,
              lambda key, hook, into: _backward(hook, kind, path, into))
    if purpose != "full":
        why = _refused_why("full_backward_pre", title, purpose)
        _suspend(module._backward_pre_hooks, "full_backward_pre", path, why, saved, found)
    else:
        _wrap(module._backward_pre_hooks, "full_backward_pre", path, calls, saved, found,
              lambda key, hook, into: _full_backward_pre(hook, path, into))


def _refused_why(kind: HookKind, title: str, purpose: Purpose) -> str:
    if purpose == "replay":
        return "the hook-free check run computes the true derivatives"
    if kind == "full_backward_pre":
        return (f"a full backward pre-hook makes torch wrap {title}'s inputs and outputs in "
                "identity nodes (BackwardHookFunction), which would move this pass's legacy "
                f"hook off the last op of {title}; it runs in the full pass")
    here, there = ("full", "legacy") if kind == "backward" else ("legacy", "full")
    return (f"torch refuses legacy and full backward hooks on one module, and this pass puts "
            f"{here} hooks on {title}; it runs in the {there} pass")


def _suspend(hooks: dict[int, Any], kind: HookKind, target: str, why: str, saved: _Saved,
             found: list[UserHook], scope: Literal["module", "tensor"] = "module") -> None:
    if not hooks:
        return
    saved.keep(hooks)
    for hook in hooks.values():
        found.append(UserHook(kind, scope, target, function_name(hook), False, why))
    hooks.clear()


def _wrap(hooks: dict[int, Any] | None, kind: HookKind, target: str, calls: UserCalls | None,
          saved: _Saved, found: list[UserHook], wrapper: Wrapper,
          scope: Literal["module", "tensor"] = "module") -> None:
    """Each hook of `hooks` recorded as one that runs; with `calls`, replaced by `wrapper`'s
    (which records each call into `calls`) until `saved` restores the table."""
    for key, hook in list((hooks or {}).items()):
        if _of_the_wrapping(hook):
            continue
        found.append(UserHook(kind, scope, target, function_name(hook), True))
        if calls is not None and hooks is not None:
            saved.keep(hooks)
            hooks[key] = wrapper(key, hook, calls)


def _of_the_wrapping(hook: Hook) -> bool:
    """A hook torch.distributed put on the model when a distributed walk wrapped it (FSDP2's
    forward hooks, which gather and free its parameters): not the user's, left to run as it is
    and not recorded as theirs."""
    return _defined_in(hook, "torch.distributed")


def _defined_in(hook: Hook, package: str) -> bool:
    """Whether a hook's function (a bound method's function) is defined in `package`."""
    module = getattr(getattr(hook, "__func__", hook), "__module__", None) or ""
    return module == package or module.startswith(f"{package}.")


def _forward_pre(hook: Hook, path: str, with_kwargs: bool, calls: UserCalls) -> Hook:
    def wrapper(module: nn.Module, args: tuple[Any, ...], *kwargs: Any) -> Any:
        received = calls.user_args("input", args)
        before = _snapshot(args)
        result = hook(module, args, *kwargs)
        new_args = None if result is None else (
            result[0] if with_kwargs else result if isinstance(result, tuple) else (result,))
        returned = None if new_args is None else calls.user_args("input", new_args)
        changed = _differs(before, args if new_args is None else new_args)
        calls.user_call("forward_pre", path, function_name(hook), received, returned, changed,
                        None)
        return result
    return wrapper


def _forward(hook: Hook, path: str, with_kwargs: bool, calls: UserCalls) -> Hook:
    def wrapper(module: nn.Module, args: tuple[Any, ...], *rest: Any) -> Any:
        output = rest[-1]
        received = calls.user_args("input", args) + calls.user_args("output", output)
        before = _snapshot(output)
        result = hook(module, args, *rest)
        returned = None if result is None else calls.user_args("output", result)
        changed = _differs(before, output if result is None else result)
        calls.user_call("forward", path, function_name(hook), received, returned, changed, None)
        return result
    return wrapper


def _backward(hook: Hook, kind: HookKind, path: str, calls: UserCalls) -> Hook:
    def wrapper(module: nn.Module, grad_input: tuple[Any, ...],
                grad_output: tuple[Any, ...]) -> Any:
        received = (calls.user_args("grad_input", grad_input)
                    + calls.user_args("grad_output", grad_output))
        before = _snapshot(grad_input)
        result = hook(module, grad_input, grad_output)
        returned = None if result is None else calls.user_args("grad_input", result)
        changed = _differs(before, grad_input if result is None else result)
        calls.user_call(kind, path, function_name(hook), received, returned, changed, None)
        return result
    return wrapper


def _full_backward_pre(hook: Hook, path: str, calls: UserCalls) -> Hook:
    def wrapper(module: nn.Module, grad_output: tuple[Any, ...]) -> Any:
        received = calls.user_args("grad_output", grad_output)
        before = _snapshot(grad_output)
        result = hook(module, grad_output)
        returned = None if result is None else calls.user_args("grad_output", result)
        changed = _differs(before, grad_output if result is None else result)
        calls.user_call("full_backward_pre", path, function_name(hook), received, returned,
                        changed, None)
        return result
    return wrapper


# --- parameters ---------------------------------------------------------------------------------


def _tensor_hooks(name: str, parameter: torch.Tensor, purpose: Purpose,
                  calls: UserCalls | None, saved: _Saved, found: list[UserHook]) -> None:
    hooks: dict[int, Any] | None = parameter._backward_hooks
    posts: dict[int, Any] | None = getattr(parameter, "_post_accumulate_grad_hooks", None)
    if purpose == "replay":
        why = _refused_why("tensor", name, purpose)
        for kind, table in (("tensor", hooks), ("post_accumulate_grad", posts)):
            if table:
                _suspend(table, kind, name, why, saved, found, "tensor")  # type: ignore[arg-type]
        return
    _wrap(hooks, "tensor", name, calls, saved, found,
          lambda key, hook, into: _tensor(hook, name, lambda: parameter, into), "tensor")
    _wrap(posts, "post_accumulate_grad", name, calls, saved, found,
          lambda key, hook, into: _post_accumulate(hook, name, into), "tensor")


def _tensor(hook: Hook, name: str, tensor: Callable[[], torch.Tensor | None],
            calls: UserCalls) -> Hook:
    """The recording stand-in for a tensor hook on `tensor()` (named `name` if the pass has
    no name for it)."""
    def wrapper(grad: torch.Tensor) -> Any:
        received = calls.user_args("grad", grad)
        before = _snapshot(grad)
        result = hook(grad)
        returned = None if result is None else calls.user_args("grad", result)
        changed = _differs(before, grad if result is None else result)
        calls.user_call("tensor", name, function_name(hook), received, returned, changed,
                        tensor())
        return result
    return wrapper


def _post_accumulate(hook: Hook, name: str, calls: UserCalls) -> Hook:
    def wrapper(tensor: torch.Tensor) -> Any:
        # What the hook is there to see is the `.grad` just accumulated (as gradexplain's own
        # post-accumulate hook records it); it may change it in place, which is the change.
        received = calls.user_args("tensor", tensor.grad)
        before = _snapshot(tensor.grad)
        result = hook(tensor)
        returned = None
        changed = _differs(before, tensor.grad)
        if changed:
            returned = calls.user_args("tensor", tensor.grad)
        calls.user_call("post_accumulate_grad", name, function_name(hook), received, returned,
                        changed, tensor)
        return result
    return wrapper


# --- hooks the model registers as it runs -------------------------------------------------------

# The tensor methods that register a hook, and the kind of hook each registers.
_REGISTERING: tuple[tuple[str, HookKind], ...] = (
    ("register_hook", "tensor"), ("register_post_accumulate_grad_hook", "post_accumulate_grad"))
# What a tensor hook is on when the pass has no name for the tensor when it is registered.
_MADE_IN_THE_PASS = "a tensor made as the model ran"


@contextmanager
def _registered_in_the_pass(purpose: Purpose, calls: UserCalls | None,
                            found: list[UserHook]) -> Iterator[None]:
    """Within the block, a tensor hook or post-accumulate-grad hook the user's code registers
    (in this thread: a hook of torch's own or gradexplain's is registered as it is) is wrapped
    to record its calls, or in the check run (`purpose="replay"`) not registered at all: a
    handle that removes nothing is handed back, as if it were."""
    thread = threading.get_ident()
    originals = {method: getattr(torch.Tensor, method) for method, _ in _REGISTERING}

    def registering(method: str, kind: HookKind) -> Callable[[torch.Tensor, Hook], Any]:
        original = originals[method]

        def register(tensor: torch.Tensor, hook: Hook) -> Any:
            if threading.get_ident() != thread or not _the_users(hook):
                return original(tensor, hook)
            known = calls.tensor_name(tensor) if calls is not None else None
            target = known or _MADE_IN_THE_PASS
            ran = purpose != "replay"
            entry = UserHook(kind, "tensor", target, function_name(hook), ran,
                             None if ran else _refused_why(kind, target, purpose))
            if entry not in found:
                found.append(entry)
            if not ran:
                return RemovableHandle(OrderedDict())
            if calls is not None:
                hook = (_tensor(hook, target, calls.hold(tensor), calls) if kind == "tensor"
                        else _post_accumulate(hook, target, calls))
            return original(tensor, hook)
        return register

    for method, kind in _REGISTERING:
        setattr(torch.Tensor, method, registering(method, kind))
    try:
        yield
    finally:
        for method, original in originals.items():
            setattr(torch.Tensor, method, original)


def _the_users(hook: Hook) -> bool:
    """Whether a hook is the user's: not a function of torch's (FSDP2's, the multi-grad
    hook's) or of gradexplain's own."""
    return not _defined_in(hook, "torch") and not _defined_in(hook, "gradexplain")


# --- values -------------------------------------------------------------------------------------


def _items(values: Any) -> tuple[Any, ...]:
    return tuple(values) if isinstance(values, (tuple, list)) else (values,)


def _snapshot(values: Any) -> tuple[Any, ...]:
    """Copies of the tensors now, so a hook that edits one in place is seen to change it."""
    return tuple(item.detach().clone() if isinstance(item, torch.Tensor) else item
                 for item in _items(values))


def _differs(before: tuple[Any, ...], after: Any) -> bool:
    items = _items(after)
    if len(before) != len(items):
        return True
    for old, new in zip(before, items, strict=True):
        if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
            if old.shape != new.shape or not torch.equal(old, new.detach()):
                return True
        elif isinstance(old, torch.Tensor) or isinstance(new, torch.Tensor):
            return True
    return False


# --- global module hooks ------------------------------------------------------------------------

_GLOBAL_TABLES: tuple[tuple[str, HookKind | None], ...] = (
    ("_global_forward_pre_hooks", "forward_pre"),
    ("_global_forward_hooks", "forward"),
    ("_global_backward_pre_hooks", "full_backward_pre"),
    ("_global_backward_hooks", None),  # legacy or full: the global flag says
)

GlobalState = tuple[list[tuple[dict[int, Any], list[tuple[int, Any]]]], bool | None]


def _suspend_globals(found: list[UserHook]) -> GlobalState:
    flag: bool | None = torch_module._global_is_full_backward_hook
    tables = []
    for attribute, kind in _GLOBAL_TABLES:
        table: dict[int, Any] = getattr(torch_module, attribute)
        if not table:
            continue
        hook_kind: HookKind = kind or ("full_backward" if flag else "backward")
        found += [UserHook(hook_kind, "global", "", function_name(hook), False, GLOBAL_WHY)
                  for hook in table.values()]
        tables.append((table, list(table.items())))
        table.clear()
    torch_module._global_is_full_backward_hook = None
    return tables, flag


def _restore_globals(state: GlobalState) -> None:
    tables, flag = state
    for table, items in tables:
        table.clear()
        table.update(items)
    torch_module._global_is_full_backward_hook = flag


__all__ = ["GLOBAL_WHY", "Purpose", "UserCalls", "function_name", "user_hooks"]
