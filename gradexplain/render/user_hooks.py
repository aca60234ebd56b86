"""How the user's own hooks read, in every format: one line per hook saying whether the pass
ran it (and which rule of torch's kept it out if not), and the mark on its calls. Plain strings;
no torch, no rich here."""

from __future__ import annotations

from gradexplain.records.paths import module_title
from gradexplain.records.trace import HookKind, Mode, UserHook

HOOK_WORDS: dict[HookKind, str] = {
    "forward_pre": "forward pre-hook",
    "forward": "forward hook",
    "backward": "legacy backward hook",
    "full_backward_pre": "full backward pre-hook",
    "full_backward": "full backward hook",
    "tensor": "tensor hook",
    "post_accumulate_grad": "post-accumulate-grad hook",
    "node_pre": "Node pre-hook",
    "node": "Node hook",
}


def user_mark(function: str) -> str:
    """What marks a call of the user's hook in a timeline: `your hook log_grads`."""
    return f"your hook {function}"


def user_hook_line(hook: UserHook, mode: Mode) -> str:
    """`your legacy backward hook log_grads on fc is not run in the full pass: torch refuses …`"""
    words = HOOK_WORDS[hook.hook]
    if hook.scope == "global":
        where = f"your global module {words} {hook.function} (on every module)"
    else:
        target = module_title(hook.target) if hook.scope == "module" else hook.target
        where = f"your {words} {hook.function} on {target}"
    if hook.ran:
        return f"{where} runs in this pass: its calls are marked “{user_mark(hook.function)}”"
    return f"{where} is not run in the {mode} pass: {hook.why}"


__all__ = ["HOOK_WORDS", "user_hook_line", "user_mark"]
