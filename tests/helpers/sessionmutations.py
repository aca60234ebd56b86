"""Saved sessions mutated as data: what a hand-edited, truncated-and-repaired or hostile session
file can hold while still being JSON of the right shape here and there.

`mutations(document, rng, count)` yields (story, mutated document) pairs: each picks a place in
the session (any key path) and does one thing to it: drop a list item, empty a list, duplicate
an entry, rename a string, swap a value for one of another type, drop a key, or put a huge,
negative or out-of-range number where a number was. Seeded: the same rng gives the same cases.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from typing import Any

KeyPath = tuple[str | int, ...]
Mutation = Callable[[Any, str | int, random.Random], str | None]


def places(data: Any, path: KeyPath = ()) -> Iterator[KeyPath]:
    """Every key path inside `data` (not the root itself)."""
    if isinstance(data, dict):
        items: list[tuple[str | int, Any]] = list(data.items())
    elif isinstance(data, list):
        items = list(enumerate(data))
    else:
        return
    for key, item in items:
        yield (*path, key)
        yield from places(item, (*path, key))


def at(data: Any, path: KeyPath) -> Any:
    for key in path:
        data = data[key]
    return data


def _drop_item(parent: Any, key: str | int, rng: random.Random) -> str | None:
    value = parent[key]
    if isinstance(value, list) and value:
        index = rng.randrange(len(value))
        del value[index]
        return f"dropped item {index}"
    return None


def _empty(parent: Any, key: str | int, rng: random.Random) -> str | None:
    if isinstance(parent[key], list) and parent[key]:
        parent[key] = []
        return "emptied the list"
    return None


def _duplicate(parent: Any, key: str | int, rng: random.Random) -> str | None:
    value = parent[key]
    if isinstance(value, list) and value:
        index = rng.randrange(len(value))
        value.insert(index, copy.deepcopy(value[index]))
        return f"duplicated item {index}"
    return None


def _rename(parent: Any, key: str | int, rng: random.Random) -> str | None:
    value = parent[key]
    if isinstance(value, str):
        parent[key] = rng.choice([value + "_renamed", "", "nobody", value[:-1], "n999"])
        return f"renamed {value[:20]!r} to {parent[key]!r}"
    return None


def _number(parent: Any, key: str | int, rng: random.Random) -> str | None:
    value = parent[key]
    if isinstance(value, int) and not isinstance(value, bool):
        parent[key] = rng.choice([-1, -7, value + 1, value + 1000, 10**6, 2**63, 10**40])
        return f"number {value} to {parent[key]}"
    if isinstance(value, float):
        parent[key] = rng.choice([1e308, -1e308, 0.0, "nan", "inf"])
        return f"float to {parent[key]}"
    return None


def _swap_type(parent: Any, key: str | int, rng: random.Random) -> str | None:
    value = parent[key]
    choices: list[Any] = [None, 0, "x", [], {}, True, 1.5, [0], [[]]]
    parent[key] = rng.choice([item for item in choices if item != value])
    return f"{type(value).__name__} to {parent[key]!r}"


def _drop_key(parent: Any, key: str | int, rng: random.Random) -> str | None:
    if isinstance(parent, dict):
        del parent[key]
        return "dropped the key"
    return None


MUTATIONS: tuple[Mutation, ...] = (_drop_item, _empty, _duplicate, _rename, _number, _number,
                                   _swap_type, _drop_key, _rename, _drop_item)


# Keys whose values name or number another record (or are a list of records).
LINKS = frozenset({
    "traces", "passes", "calls", "tensors", "graph", "events", "runs", "derivations", "lines",
    "terms", "args", "module", "target", "call", "run", "index", "tensor", "node", "node_id",
    "id", "next", "seq", "variable", "inputs", "outputs", "arguments", "root", "legacy_node",
    "pin", "line", "term", "of", "wrt", "names", "mode", "repeats", "stale_from", "after_seq",
    "returns_argument", "refusals", "short_names", "forward", "shape", "value", "hook"})


def mutations(document: Any, rng: random.Random, count: int) -> Iterator[tuple[str, Any]]:
    """`count` mutated copies of `document` (a session file's JSON), each with its story."""
    # Chosen by pattern first (`session.traces.*.calls.*.module`), then a place of it: else
    # nearly every case would land inside a tensor's values.
    patterns: dict[str, list[KeyPath]] = {}
    for path in places(document["session"], ("session",)):
        pattern = ".".join("*" if isinstance(key, int) else key for key in path)
        patterns.setdefault(pattern, []).append(path)
    # The keys that tie one record to another, weighted up: most patterns are values.
    names = sorted(patterns)
    names += [name for name in names if name.rsplit(".", 1)[-1] in LINKS] * 3
    made = 0
    while made < count:
        path = rng.choice(patterns[rng.choice(names)])
        mutation = rng.choice(MUTATIONS)
        mutated = copy.deepcopy(document)
        story = mutation(at(mutated, path[:-1]), path[-1], rng)
        if story is None:
            continue
        made += 1
        yield f"{'.'.join(map(str, path))}: {story}", mutated
