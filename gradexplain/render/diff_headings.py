"""How every diff renderer (text, markdown) heads one call of a module: the same words in
both, so a reader moving between them finds the same run, call and hook numbers."""

from __future__ import annotations

from gradexplain.records.diff import CallDiff, ModuleDiff


def call_headings(module: ModuleDiff, call: CallDiff) -> tuple[str, str, str]:
    """`run 1` (`, call 2` when the module ran more than once in that run), and the two
    columns, `legacy (#13)` and `full (#47)`."""
    title = f"run {call.run}"
    if sum(1 for other in module.calls if other.run == call.run) > 1:
        title += f", call {call.ordinal}"
    legacy = f"legacy (#{call.legacy_seq})" if call.legacy_seq is not None else "legacy"
    full = f"full (#{call.full_seq})" if call.full_seq is not None else "full"
    return title, legacy, full


__all__ = ["call_headings"]
