"""Spec files for the fuzz tests (tests/test_fuzz.py): hypothesis strategies that take the valid
specs in specs/ as seeds and break them.

Two families. Tree mutations load a seed with yaml.safe_load, change the plain data (a value of
the wrong type, a key deleted or added, a name renamed everywhere to a unicode, reserved or
builtin name, odd shapes, huge and non-finite numbers, deep nesting, explicit YAML tags, edited
forward steps, thousands of steps, parts grafted from another seed), usually several changes at
once, and write it back as YAML (block or flow style) or JSON. Byte mutations work on the file
itself: empty, whitespace or comments only, binary junk, invalid UTF-8, truncation, characters
inserted or deleted, byte-order marks, tabs, CR and CRLF line ends, files over and just under the
1,000,000-byte bound.

Every drawn file carries its story (what was done to which seed), which the tests `note()` so a
failure reads as the list of changes that led to it. Nothing here runs gradexplain.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent.parent
SEED_TEXTS: dict[str, str] = {
    path.stem: path.read_text(encoding="utf-8") for path in sorted((REPO / "specs").glob("*.yaml"))
}
SEED_NAMES = tuple(SEED_TEXTS)

# Plain YAML data, as yaml.safe_load returns it: mutators walk and change it in place.
Tree = Any
KeyPath = tuple[str | int, ...]

# The spec language's vocabulary (DESIGN section 3 and gradexplain/spec/catalogue), written out
# here rather than imported so the generator does not lean on the code under test.
FUNCTIONS = ("sigmoid", "tanh", "relu", "exp", "log", "sin", "cos", "sqrt", "abs", "square",
             "leaky_relu", "clone", "detach", "sum", "mean", "softmax", "log_softmax", "matmul",
             "reshape", "flatten", "transpose", "squeeze", "unsqueeze", "chunk")
LAYER_KINDS = ("Linear", "Conv2d", "Embedding", "ReLU", "LeakyReLU", "Sigmoid", "Tanh", "GELU",
               "Softmax", "Flatten", "MaxPool2d", "LayerNorm", "Identity")
KNOWN_KEYS = ("name", "about", "seed", "dtype", "inputs", "params", "layers", "modules",
              "forward", "backward", "grad", "interventions", "captures", "args", "steps",
              "returns", "value", "randn", "rand", "zeros", "ones", "requires_grad", "weight",
              "bias", "of", "wrt", "gradient", "grad_outputs", "retain_graph", "times",
              "zero_grad", "zero_grad_between", "expect_error", "hook", "on", "action",
              "factor", "min", "max", "module", "remove_after", "one_hot", "in_features",
              "out_features", "kernel_size", "padding", "stride", "dilation", "groups", "dim",
              "inplace", "negative_slope", "eps", "normalized_shape", "start_dim", "end_dim")

# Names a user might pick that collide with something: the step language's functions, Python
# builtins and keywords, nn.Module attributes, dunders, and text that only looks like a name
# (NFKC-equivalent letters, right-to-left text, zero-width and control characters, emoji).
ODD_NAMES = (
    "sum", "open", "print", "eval", "exec", "__import__", "__class__", "_x", "forward",
    "backward", "grad", "self", "torch", "nn", "F", "None", "True", "lambda", "class", "def",
    "parameters", "training", "weight", "bias", "state_dict", "register_buffer", "T",
    "x.y", "x y", "x-y", "1x", "", " ", "x\u200b", "\u200bx", "\u202ex", "\u05d0\u05d1",
    "\u0627\u0644\u0633", "\U0001f525", "x\U0001f525", "\u00e9", "e\u0301", "\ufb01x",
    "\U0001d431", "\u212b", "\u0430", "\u0661", "x\x00", "x\t", "x\n", "x\x85", "\ud800",
    "\ufeffx", "Ω", "ǅ", "a" * 300, "y", "x", "z", "loss", "module", "module2",
)
# Numbers at the edges: float overflow in float32 and float64, subnormals, signed zero, values
# past every integer width, non-finite ones, and booleans (which YAML and Python treat as ints).
ODD_NUMBERS: tuple[object, ...] = (
    0, -1, 1, 2, 3, 255, 256, 2**31, 2**31 - 1, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63),
    10**30, -(10**30), 10**400, 0.0, -0.0, 0.5, 1e-45, 5e-324, 3.4e38, 3.5e38, 1e308, -1e308,
    1.7976931348623157e308, math.inf, -math.inf, math.nan, True, False,
)
ODD_SHAPES: tuple[object, ...] = (
    [], [0], [1], [0, 3], [-1], [-5, 2], [100_000, 100_000], [10_000_000], [10_000_001],
    [3_000, 3_000], [1_000_000], [1_000_001], [2**31], [2**63], [10**30], [1] * 64, [1] * 65,
    [2] * 24, [1] * 200, [2.5], [1.0], ["3"], [None], [True], [[2]], 3, 0, -3, "3", "[2, 3]",
    {"x": 2}, None, [2, 3, 4, 5, 6, 7],
)
# What the step language refuses or finds odd, to splice into a forward step.
ODD_INDICES = ("0", "-1", ":", "::0", "::-1", "None", "...", "..., ...", "0, 0", "5", "1:0",
               ":, None", "10**30", "1000000000000", "1.5", "x", "True", "0:1:0", "'a'")
ODD_OPERATORS = ("+", "-", "*", "/", "@", "**", "//", "%", "<", "and", "|", "==")
ODD_LITERALS = ("0", "-0.0", "1e999", "-1e999", "1e308", "1e-320", "3.5e38", "10" + "0" * 40,
                "0x" + "f" * 40, "1_000", "1j", "True", "None", "'a'", "b'a'", "...", "[1, 2]",
                "(1, 2)", "{1}", "0.1", "2**1000")
ODD_ATTRIBUTES = ("T", "mT", "exp", "grad", "data", "__class__", "_base", "shape", "H")
ODD_TAGGED = (
    '!!int "abc"', '!!int ""', '!!int "0x"', '!!int "0o9"', '!!int "1:2:3"', '!!float "abc"',
    '!!float ""', '!!float "1:x"', '!!float ".nan"', '!!bool "maybe"', '!!null "x"',
    '!!str 5', '!!binary aGk=', '!!timestamp 2001-02-30', '!!timestamp "x"', "!!set {a, b}",
    "!!omap [a: 1]", "!!pairs [a: 1]", "!custom x", "!!python/object:os.system x",
    "!!python/name:os.system ''", "!<tag:yaml.org,2002:int> 7", "!!merge <<", "&anchor 1",
    "*undefined_alias", "? [a]", "2001-01-01", "0b102", "0o17", "0x1G", "1:30", "-.inf", "~",
    "'" + "1" * 5000 + "'", "1" * 4301, "-" + "9" * 5000, "1" * 300 + ".0", "1e400", "1.0e+400",
    ".NaN", "+.inf", "yes", "No", "on", "OFF", "y", "0.", ".5", "1_0.0_1", "0x_1",
)
DEEP_LEVELS = (8, 32, 63, 64, 65, 66, 100, 500, 1000, 5000)
STEP_COUNTS = (10, 200, 1_999, 2_000, 2_001, 3_000)


@dataclass(frozen=True)
class SpecFile:
    """One generated spec file: its bytes and the story of how it was made."""

    data: bytes
    story: tuple[str, ...]

    def describe(self) -> str:
        return " | ".join(self.story)

    def __repr__(self) -> str:
        # Hypothesis prints the failing case with repr: a megabyte of bytes helps nobody.
        data = self.data if len(self.data) <= 2_000 else (
            self.data[:1_000] + b"..." + self.data[-200:])
        return f"SpecFile(data={data!r}, story={self.story!r})"


# --- helpers over the plain-data tree ------------------------------------------------------------


class _SeedLoader(yaml.SafeLoader):
    """yaml.safe_load, except that only true and false are booleans: YAML 1.1 also reads on, off,
    yes and no as booleans, which would turn an intervention's `on:` key into True (the spec
    reader takes keys as written)."""


_SeedLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SeedLoader.add_implicit_resolver("tag:yaml.org,2002:bool",
                                  re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                  list("tTfF"))


def load_seed(name: str) -> Tree:
    """A fresh, mutable copy of a seed spec's data."""
    # A SafeLoader subclass: nothing but plain data is ever built.
    return yaml.load(SEED_TEXTS[name], Loader=_SeedLoader)


def all_paths(tree: Tree, prefix: KeyPath = ()) -> list[KeyPath]:
    """Every value's path, the root's () first, then depth-first in document order."""
    found: list[KeyPath] = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            found += all_paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            found += all_paths(value, (*prefix, index))
    return found


def get_at(tree: Tree, path: KeyPath) -> Tree:
    for part in path:
        tree = tree[part]
    return tree


def set_at(tree: Tree, path: KeyPath, value: Tree) -> Tree:
    """Put `value` at `path` and return the (possibly new) root."""
    if not path:
        return value
    get_at(tree, path[:-1])[path[-1]] = value
    return tree


def show_path(path: KeyPath) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<root>"


def is_step_path(tree: Tree, path: KeyPath) -> bool:
    """Is the value at `path` a forward step: top-level `forward` items, or a module's `steps`?"""
    if len(path) < 2 or not isinstance(path[-1], int) or not isinstance(get_at(tree, path), str):
        return False
    return path[-2] == "steps" or path[:-1] == ("forward",)


def step_lists(tree: Tree) -> list[KeyPath]:
    """The paths of every list of forward steps in the tree."""
    return [path for path in all_paths(tree)
            if isinstance(get_at(tree, path), list) and path
            and (path[-1] == "steps" or path == ("forward",))]


def defined_names(tree: Tree) -> list[str]:
    """Names the spec defines: inputs, params, layers, modules, captures and step targets."""
    names: list[str] = []
    for path in all_paths(tree):
        if len(path) >= 2 and path[-2] in ("inputs", "params", "layers", "modules", "captures") \
                and isinstance(path[-1], str):
            names.append(path[-1])
        value = get_at(tree, path)
        if is_step_path(tree, path) and "=" in value:
            names += [part.strip() for part in value.split("=", 1)[0].split(",")]
    return sorted({name for name in names if name})


_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


def rename_everywhere(tree: Tree, old: str, new: str) -> Tree:
    """Rename a name in keys, in step text (whole identifiers) and in values that are exactly
    that name (`backward: y`, `of: y`, `on: module2`), keeping the document's order."""
    if isinstance(tree, dict):
        return {(new if key == old else key): rename_everywhere(value, old, new)
                for key, value in tree.items()}
    if isinstance(tree, list):
        return [rename_everywhere(item, old, new) for item in tree]
    if isinstance(tree, str):
        if tree == old:
            return new
        if "=" in tree:
            return _IDENTIFIER.sub(lambda match: new if match.group(0) == old else match.group(0),
                                   tree)
    return tree


# --- emitting -----------------------------------------------------------------------------------


class RawSlots:
    """Text that yaml.safe_dump cannot or will not write (10,000 levels of brackets, integers of
    5,000 digits, explicit tags): a placeholder goes into the tree and is swapped for the raw
    text after dumping."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def slot(self, text: str) -> str:
        token = f"RAWSLOT{len(self.texts)}X"
        self.texts[token] = text
        return token

    def fill(self, dumped: str) -> str:
        for token, text in self.texts.items():
            dumped = dumped.replace(f'"{token}"', text).replace(f"'{token}'", text)
            dumped = dumped.replace(token, text)
        return dumped


def emit(tree: Tree, style: str, slots: RawSlots) -> str:
    """The tree as YAML text: block style, flow style on one line, or JSON (itself YAML)."""
    if style == "json":
        try:
            text = json.dumps(tree, ensure_ascii=False, allow_nan=False)
        except (ValueError, TypeError):
            style = "block"
        else:
            return slots.fill(text)
    text = yaml.safe_dump(tree, allow_unicode=True, sort_keys=False,
                          default_flow_style=(style == "flow"), width=10**9 if style == "flow"
                          else 100)
    return slots.fill(text)


def flow_text(value: Tree) -> str:
    """A value as one line of flow YAML, for splicing inside raw text."""
    text = yaml.safe_dump(value, allow_unicode=True, default_flow_style=True, width=10**9)
    return text.removesuffix("\n...\n").strip()


# --- value strategies --------------------------------------------------------------------------

scalars = st.one_of(
    st.text(max_size=12), st.integers(-(2**70), 2**70), st.floats(), st.booleans(), st.none(),
    st.sampled_from(ODD_NUMBERS), st.sampled_from(ODD_NAMES),
)
any_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=8) | st.sampled_from(KNOWN_KEYS), inner, max_size=3),
    max_leaves=8,
)
odd_names = st.sampled_from(ODD_NAMES) | st.text(min_size=1, max_size=10)


# --- tree mutators -------------------------------------------------------------------------------
# Each takes the draw function, the tree and the raw slots, changes the tree (returning the new
# root) and says what it did.

Mutator = Callable[[st.DrawFn, Tree, RawSlots], tuple[Tree, str]]


def _pick_path(draw: st.DrawFn, tree: Tree, keep: Callable[[KeyPath], bool]) -> KeyPath | None:
    paths = [path for path in all_paths(tree) if keep(path)]
    return draw(st.sampled_from(paths)) if paths else None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def wrong_type(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    path = _pick_path(draw, tree, lambda path: True)
    assert path is not None
    value = draw(any_values)
    return set_at(tree, path, value), f"{show_path(path)} = {value!r:.60}"


def delete_key(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    path = _pick_path(draw, tree, lambda path: bool(path))
    if path is None:
        return tree, "nothing to delete"
    parent = get_at(tree, path[:-1])
    del parent[path[-1]]
    return tree, f"delete {show_path(path)}"


def add_key(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    path = _pick_path(draw, tree, lambda path: isinstance(get_at(tree, path), dict))
    if path is None:
        return tree, "no mapping to add to"
    target = get_at(tree, path)
    existing = list(target) or ["forward"]
    key = draw(st.one_of(
        st.sampled_from(KNOWN_KEYS), odd_names,
        st.sampled_from(existing).map(lambda key: key[:-1] or "k"),  # a typo of a present key
        st.sampled_from(existing).map(lambda key: key.upper()),
    ))
    value = draw(any_values | st.sampled_from([get_at(tree, other) for other in
                                              all_paths(tree)[:40]]).map(copy.deepcopy))
    target[key] = value
    return tree, f"{show_path((*path, key))} += {value!r:.60}"


def rename_name(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    names = defined_names(tree)
    if not names:
        return tree, "no name to rename"
    old = draw(st.sampled_from(names))
    new = draw(odd_names | st.sampled_from(names) | st.sampled_from(FUNCTIONS + LAYER_KINDS))
    if draw(st.booleans()):
        return rename_everywhere(tree, old, new), f"rename {old!r} -> {new!r} everywhere"
    # Only the definition: the steps still use the old name.
    paths = [path for path in all_paths(tree) if path and path[-1] == old]
    if not paths:
        return rename_everywhere(tree, old, new), f"rename {old!r} -> {new!r} everywhere"
    path = draw(st.sampled_from(paths))
    parent = get_at(tree, path[:-1])
    parent[new] = parent.pop(old)
    return tree, f"rename the key {show_path(path)} -> {new!r}"


def odd_shape(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    shape_keys = ("randn", "rand", "zeros", "ones", "normalized_shape", "kernel_size")
    path = _pick_path(draw, tree, lambda path: bool(path) and path[-1] in shape_keys)
    if path is None:
        path = _pick_path(draw, tree, lambda path: bool(path) and path[-1] in ("value", "weight",
                                                                               "gradient"))
    if path is None:
        return tree, "no shape to change"
    shape = draw(st.sampled_from(ODD_SHAPES) | st.lists(st.integers(-3, 12), max_size=7)
                 | st.lists(st.integers(1, 3), min_size=1, max_size=5))
    if path[-1] in ("value", "weight", "gradient"):
        # A literal: a nested list of that shape, where the shape is small enough to write out.
        dims = shape if isinstance(shape, list) else []
        if all(isinstance(dim, int) and 0 <= dim <= 4 for dim in dims) and len(dims) <= 6:
            literal: Tree = draw(st.sampled_from([0.5, -2.0, 1e308, 3.5e38, 0.0]))
            for dim in reversed(dims):
                literal = [copy.deepcopy(literal) for _ in range(dim)]
            return set_at(tree, path, literal), f"{show_path(path)} = literal of shape {dims}"
    return set_at(tree, path, copy.deepcopy(shape)), f"{show_path(path)} = {shape!r:.60}"


def odd_number(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    path = _pick_path(draw, tree, lambda path: _is_number(get_at(tree, path)))
    if path is None:
        return tree, "no number to change"
    number = draw(st.sampled_from(ODD_NUMBERS) | st.floats() | st.integers(-(2**66), 2**66))
    if isinstance(number, int) and abs(number) > 10**300:
        # str() of it works, but keep the emitter's own checks out of the way.
        return set_at(tree, path, slots.slot(str(number))), f"{show_path(path)} = 10**400"
    return set_at(tree, path, number), f"{show_path(path)} = {number!r}"


def finite_number(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    """Numbers a spec accepts but float32 cannot hold, or that make torch's arithmetic odd:
    the spec stays valid, so the run and its label checks see them."""
    parts = {"value", "weight", "params", "gradient", "factor", "min", "max", "inputs"}
    paths = [path for path in all_paths(tree) if _is_number(get_at(tree, path))
             and parts & {str(part) for part in path}]
    if not paths:
        return tree, "no literal number"
    path = draw(st.sampled_from(paths))
    number = draw(st.sampled_from((0.0, -0.0, 1e-45, 1e-30, 1e30, 3.4e38, 3.5e38, 1e300, -1e300,
                                   1e-300, 1.0, -1.0, 100.0)))
    return set_at(tree, path, number), f"{show_path(path)} = {number!r}"


def deep_nesting(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    path = _pick_path(draw, tree, lambda path: bool(path))
    if path is None:
        return tree, "nothing to nest"
    levels = draw(st.sampled_from(DEEP_LEVELS) | st.integers(1, 5_000))
    inner = flow_text(get_at(tree, path)) if draw(st.booleans()) else "1"
    if draw(st.booleans()):
        text = "[" * levels + inner + "]" * levels
    else:
        text = "{a: " * levels + inner + "}" * levels
    return (set_at(tree, path, slots.slot(text)),
            f"{show_path(path)} wrapped in {levels} levels of {text[0]}")


def tagged_scalar(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    path = _pick_path(draw, tree, lambda path: bool(path)
                      and not isinstance(get_at(tree, path), dict | list))
    if path is None:
        return tree, "no scalar to tag"
    text = draw(st.sampled_from(ODD_TAGGED))
    if text == "? [a]":
        text = "{? [a] : 1}"
    return set_at(tree, path, slots.slot(text)), f"{show_path(path)} = {text[:40]}"


def _split_step(text: str) -> tuple[str, str]:
    if "=" in text:
        target, expr = text.split("=", 1)
        return target.strip(), expr.strip()
    return "fuzzed", text


@st.composite
def step_text(draw: st.DrawFn, text: str, names: list[str]) -> str:
    """A forward step changed the way a person or a tool might: a function wrapped around it, an
    operand or index added, a number or name swapped, deep nesting, random characters."""
    target, expr = _split_step(text)
    name = st.sampled_from(names or ["x"])
    operand = name | st.sampled_from(ODD_LITERALS) | st.just(f"({expr})")
    kind = draw(st.sampled_from(("wrap", "binop", "index", "attribute", "number", "name", "deep",
                                 "chain", "characters", "target", "text", "kwargs")))
    if kind == "wrap":
        func = draw(st.sampled_from(FUNCTIONS) | name | odd_names)
        expr = f"{func}({expr})"
    elif kind == "kwargs":
        func = draw(st.sampled_from(FUNCTIONS))
        kwarg = draw(st.sampled_from(("dim=0", "dim=-1", "dim=5", "dim=1.5", "keepdim=True",
                                      "keepdim=1", "negative_slope=1e308", "chunks=0",
                                      "chunks=3", "shape=[2]", "shape=(-1,)", "dim0=0, dim1=1",
                                      "start_dim=1", "end_dim=-5", "other=x", "input=x",
                                      "**x", "*x", "dim=None")))
        expr = f"{func}({expr}, {kwarg})"
    elif kind == "binop":
        op = draw(st.sampled_from(ODD_OPERATORS))
        expr = f"({expr}) {op} {draw(operand)}" if draw(st.booleans()) \
            else f"{draw(operand)} {op} ({expr})"
    elif kind == "index":
        expr = f"({expr})[{draw(st.sampled_from(ODD_INDICES))}]"
    elif kind == "attribute":
        expr = f"({expr}).{draw(st.sampled_from(ODD_ATTRIBUTES))}"
    elif kind == "number":
        numbers = re.findall(r"\d+(?:\.\d*)?", expr)
        literal = draw(st.sampled_from(ODD_LITERALS))
        expr = expr.replace(draw(st.sampled_from(numbers)), literal, 1) if numbers \
            else f"({expr}) * {literal}"
    elif kind == "name":
        found = _IDENTIFIER.findall(expr)
        if found:
            old = draw(st.sampled_from(found))
            new = draw(odd_names | name)
            expr = re.sub(rf"(?<![\w.]){re.escape(old)}\b", lambda _: new, expr, count=1)
    elif kind == "deep":
        levels = draw(st.sampled_from((16, 24, 31, 32, 33, 100, 199, 200, 201, 500, 990)))
        how = draw(st.sampled_from(("-", "(", "sigmoid(", "sum(", "[")))
        expr = ("-" * levels + f"({expr})" if how == "-"
                else how * levels + expr + (")" if how != "[" else "]") * levels)
    elif kind == "chain":
        count = draw(st.sampled_from((16, 31, 32, 33, 34, 60, 200)))
        op = draw(st.sampled_from(("+", "*", "@", "**")))
        expr = f" {op} ".join([draw(name) for _ in range(count)])
    elif kind == "characters":
        chars = draw(st.lists(st.characters(), min_size=1, max_size=3))
        at = draw(st.integers(0, len(expr)))
        expr = expr[:at] + "".join(chars) + expr[at + draw(st.integers(0, 2)):]
    elif kind == "target":
        target = draw(odd_names | st.sampled_from((f"{target}, extra", "a, b, c", "x",
                                                  "(a)", "a.b", "a[0]", "*a", "a = b")))
    else:
        return draw(st.text(max_size=40))
    return f"{target} = {expr}"


def edit_step(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    path = _pick_path(draw, tree, lambda path: is_step_path(tree, path))
    if path is None:
        return tree, "no step to edit"
    old = get_at(tree, path)
    new = draw(step_text(old, defined_names(tree)))
    return set_at(tree, path, new), f"{show_path(path)}: {old!r} -> {new!r:.120}"


def reorder_steps(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    lists = [path for path in step_lists(tree) if len(get_at(tree, path)) >= 1]
    if not lists:
        return tree, "no steps to reorder"
    path = draw(st.sampled_from(lists))
    steps = get_at(tree, path)
    how = draw(st.sampled_from(("reverse", "duplicate", "drop", "empty")))
    if how == "reverse":
        steps.reverse()
    elif how == "duplicate":
        steps.append(copy.deepcopy(draw(st.sampled_from(steps))))
    elif how == "drop":
        steps.pop(draw(st.integers(0, len(steps) - 1)))
    else:
        steps.clear()
    return tree, f"{how} the steps of {show_path(path)}"


def many_steps(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    """Pad the top-level forward with steps on the first input, up to or past the step bound."""
    inputs = tree.get("inputs") if isinstance(tree, dict) else None
    forward = tree.get("forward") if isinstance(tree, dict) else None
    if not isinstance(inputs, dict) or not inputs or not isinstance(forward, list):
        return tree, "no forward to pad"
    source = next(iter(inputs))
    count = draw(st.sampled_from(STEP_COUNTS))
    filler = [f"pad{i} = {source} * 1.0" for i in range(count)]
    tree["forward"] = filler + forward
    return tree, f"{count} extra steps on {source!r}"


def layer_edit(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    """Another layer kind, or other arguments, for a declared layer."""
    path = _pick_path(draw, tree, lambda path: len(path) >= 2 and path[-2] == "layers")
    if path is None:
        return tree, "no layer to edit"
    layer = get_at(tree, path)
    kind = draw(st.sampled_from(LAYER_KINDS))
    if isinstance(layer, dict) and draw(st.booleans()):
        options = next((value for key, value in layer.items() if key not in ("weight", "bias")),
                       None)
        options = dict(options) if isinstance(options, dict) else {}
        key = draw(st.sampled_from(("in_features", "out_features", "bias", "inplace",
                                    "negative_slope", "dim", "kernel_size", "padding", "stride",
                                    "dilation", "groups", "eps", "elementwise_affine",
                                    "normalized_shape", "num_embeddings", "embedding_dim",
                                    "start_dim", "end_dim", "in_channels", "out_channels")))
        options[key] = draw(st.sampled_from((0, 1, 2, 3, 5, 16, -1, 1_000_000, 1_000_001, True,
                                             False, 0.0, 1e308, -1e308, 1e-300, [2, 2],
                                             [0, 1], None)))
        kind_key = next((key for key in layer if key not in ("weight", "bias")), kind)
        layer[kind_key] = options
        return tree, f"{show_path(path)}.{kind_key}.{key} = {options[key]!r}"
    return set_at(tree, path, kind), f"{show_path(path)} = {kind}"


def graft(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    """A top-level part of another seed (its backward, grad, interventions, modules...)."""
    other_name = draw(st.sampled_from(SEED_NAMES))
    other = load_seed(other_name)
    key = draw(st.sampled_from(list(other)))
    if not isinstance(tree, dict):
        return tree, "no mapping to graft into"
    tree[key] = other[key]
    return tree, f"{key} from {other_name}"


def odd_dtype(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    dtype = draw(st.sampled_from(("float64", "int64", "float16", "bfloat16", "float", "FLOAT32",
                                  "complex64", "bool")))
    inputs = tree.get("inputs") if isinstance(tree, dict) else None
    if isinstance(inputs, dict) and inputs and draw(st.booleans()):
        name = draw(st.sampled_from(list(inputs)))
        if isinstance(inputs[name], dict):
            inputs[name]["dtype"] = dtype
            return tree, f"inputs.{name}.dtype = {dtype}"
    if isinstance(tree, dict):
        tree["dtype"] = dtype
    return tree, f"dtype = {dtype}"


def module_paths(tree: Tree) -> list[str]:
    """Module paths a hook or capture may name: modules at any depth and their layers, and the
    top-level layers ("" is the whole model)."""
    found = [""]

    def visit(part: Tree, prefix: str) -> None:
        if not isinstance(part, dict):
            return
        layers = part.get("layers")
        if isinstance(layers, dict):
            found.extend(f"{prefix}{name}" for name in layers)
        modules = part.get("modules")
        if isinstance(modules, dict):
            for name, child in modules.items():
                found.append(f"{prefix}{name}")
                visit(child, f"{prefix}{name}.")

    visit(tree, "")
    return found


def tensor_names(tree: Tree) -> list[str]:
    """Top-level tensors: the inputs and the targets of the top-level forward's steps."""
    names = list(tree["inputs"]) if isinstance(tree.get("inputs"), dict) else []
    forward = tree.get("forward")
    for step in forward if isinstance(forward, list) else []:
        if isinstance(step, str) and "=" in step:
            names += [part.strip() for part in step.split("=", 1)[0].split(",")]
    return names or ["x"]


def add_intervention(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    """A hook from the catalogue that replaces what flows on, on a module or a tensor."""
    if not isinstance(tree, dict):
        return tree, "no mapping"
    hook = draw(st.sampled_from(("backward", "full_backward", "full_backward_pre", "tensor")))
    targets = tensor_names(tree) if hook == "tensor" else module_paths(tree)
    item: dict[str, Tree] = {"hook": hook, "on": draw(st.sampled_from(targets)),
                             "action": draw(st.sampled_from(("normalize", "scale", "zero", "clip",
                                                             "wrong_length", "wrong_shape")))}
    if item["action"] == "scale":
        item["factor"] = draw(st.sampled_from((10, 0, -1, 0.5, 1e30, 1e300)))
    if item["action"] == "clip":
        item["min"], item["max"] = draw(st.sampled_from(((-1, 1), (0, 0), (0.1, 0.2), (-1e300,
                                                                                        1e300))))
    if item["action"].startswith("wrong_"):
        item["expect_error"] = draw(st.sampled_from(("invalid number of grad_input",
                                                     "changed the size of value", "size", "x")))
    items = tree.get("interventions")
    tree["interventions"] = ([*items, item] if isinstance(items, list) and draw(st.booleans())
                             else [item])
    return tree, f"intervention {flow_text(item)}"


def add_capture(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    if not isinstance(tree, dict):
        return tree, "no mapping"
    module = draw(st.sampled_from(module_paths(tree)))
    value: Tree = module if draw(st.booleans()) else {
        "module": module, "remove_after": draw(st.integers(0, 3))}
    tree["captures"] = {"fuzz_capture": value}
    return tree, f"captures.fuzz_capture = {value!r}"


def change_backward(draw: st.DrawFn, tree: Tree, slots: RawSlots) -> tuple[Tree, str]:
    """Another tensor to differentiate, repeated, with retain_graph and zero_grad, or a grad call
    instead: the run's shape changes while the spec often stays valid."""
    if not isinstance(tree, dict):
        return tree, "no mapping"
    names = tensor_names(tree)
    of = draw(st.sampled_from(names))
    kind = draw(st.sampled_from(("name", "mapping", "list", "grad")))
    value: Tree
    if kind == "name":
        tree["backward"] = value = of
    elif kind == "grad":
        wrt = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
        value = {"of": of, "wrt": wrt if len(wrt) > 1 else wrt[0],
                 "grad_outputs": draw(st.sampled_from(("ones", {"one_hot": 0}, {"one_hot": 1}))),
                 "retain_graph": True}
        tree.pop("backward", None)
        tree["grad"] = [value]
    else:
        value = {"of": of}
        value["times"] = draw(st.integers(1, 3))
        value["retain_graph"] = draw(st.booleans())
        if draw(st.booleans()):
            value["zero_grad_between"] = True
        tree["backward"] = [value, of] if kind == "list" else value
    return tree, f"{kind}: {flow_text(value)}"


TREE_MUTATORS: tuple[Mutator, ...] = (
    wrong_type, delete_key, add_key, rename_name, odd_shape, odd_number, finite_number,
    deep_nesting, tagged_scalar, edit_step, edit_step, reorder_steps, many_steps, layer_edit,
    graft, odd_dtype, add_intervention, add_capture, change_backward,
)
# Changes after which the spec is often still valid, so the run itself gets exercised.
GENTLE_MUTATORS: tuple[Mutator, ...] = (
    finite_number, edit_step, layer_edit, graft, odd_dtype, rename_name, reorder_steps,
    add_intervention, add_intervention, add_capture, change_backward, change_backward,
)


@st.composite
def mutated_specs(draw: st.DrawFn, mutators: tuple[Mutator, ...] = TREE_MUTATORS,
                  most: int = 3) -> SpecFile:
    """A seed with one to `most` tree mutations, written as YAML or JSON."""
    seed = draw(st.sampled_from(SEED_NAMES))
    tree = load_seed(seed)
    slots = RawSlots()
    story = [f"seed {seed}"]
    for mutator in draw(st.lists(st.sampled_from(mutators), min_size=1, max_size=most)):
        tree, what = mutator(draw, tree, slots)
        story.append(f"{mutator.__name__}: {what}")
    style = draw(st.sampled_from(("block", "block", "flow", "json")))
    story.append(f"written as {style}")
    text = emit(tree, style, slots)
    # A lone surrogate (from a YAML escape like "\ud800") cannot be encoded: such a file holds the
    # bytes Python's surrogatepass gives, which is what a careless tool would write.
    return SpecFile(text.encode("utf-8", "surrogatepass"), tuple(story))


# --- byte mutations ----------------------------------------------------------------------------

BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00", b"\xef\xbb\xbf" * 2)
BAD_UTF8 = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\x80",
            b"\xe2\x82")
JUNK = (b"\x00", b"\x1b[31m", b"\x07", b"\r", b"\x0c", b"\x85", b"\xc2\x85", b"\xe2\x80\xa8",
        b"\t", b"%YAML 1.1\n", b"%TAG ! tag:x,2000:\n", b"---\n", b"...\n", b"--- |\n",
        b"&a ", b"*a", b"!!", b"? ", b": ", b"- ", b"{", b"[", b"'", b'"', b"#", b"|", b">",
        b"@", b"`", b"%", b"\\")
LIMIT = 1_000_000
SMALL_KINDS = ("empty", "blank", "comments", "binary", "bad_utf8", "truncate", "insert", "delete",
               "bom", "tabs", "crlf", "cr", "junk", "utf16", "duplicate", "nul_padding",
               "documents")
LARGE_KINDS = ("over_limit", "at_limit", "under_limit_steps", "under_limit_about", "long_line")


@st.composite
def byte_specs(draw: st.DrawFn) -> SpecFile:
    """A seed's bytes, or nothing like a seed: broken at the level of bytes and lines."""
    seed = draw(st.sampled_from(SEED_NAMES))
    base = SEED_TEXTS[seed].encode("utf-8")
    # Files near the size bound take a second or more each to read: about one case in eight.
    kind = draw(st.sampled_from(SMALL_KINDS * 2 + LARGE_KINDS))
    data = base
    if kind == "empty":
        data = b""
    elif kind == "blank":
        data = draw(st.sampled_from((b" ", b"\n", b"\n\n\n", b"\t", b"   \n \t\n", b"\r\n")))
    elif kind == "comments":
        data = draw(st.sampled_from((b"# only a comment\n", b"#", b"# a\n# b\n\n", b"---\n#\n",
                                     b"...\n", b"---\n...\n", b"%YAML 1.1\n---\n")))
    elif kind == "binary":
        data = draw(st.binary(max_size=300))
    elif kind == "bad_utf8":
        at = draw(st.integers(0, len(base)))
        data = base[:at] + draw(st.sampled_from(BAD_UTF8)) + base[at:]
    elif kind == "truncate":
        data = base[:draw(st.integers(0, len(base)))]
    elif kind == "insert":
        at = draw(st.integers(0, len(base)))
        text = "".join(draw(st.lists(st.characters(), min_size=1, max_size=4)))
        data = base[:at] + text.encode("utf-8", "surrogatepass") + base[at:]
    elif kind == "delete":
        at = draw(st.integers(0, len(base)))
        data = base[:at] + base[at + draw(st.integers(1, 20)):]
    elif kind == "bom":
        data = draw(st.sampled_from(BOMS)) + base
    elif kind == "tabs":
        data = base.replace(b"  ", b"\t")
    elif kind == "crlf":
        data = base.replace(b"\n", b"\r\n")
    elif kind == "cr":
        data = base.replace(b"\n", b"\r")
    elif kind == "junk":
        at = draw(st.integers(0, len(base)))
        data = base[:at] + draw(st.sampled_from(JUNK)) + base[at:]
    elif kind == "utf16":
        data = base.decode("utf-8").encode(draw(st.sampled_from(("utf-16", "utf-16-le",
                                                                 "utf-32"))))
    elif kind == "duplicate":
        data = base + draw(st.sampled_from((b"", b"---\n"))) + base
    elif kind == "over_limit":
        data = base + b"#" * (LIMIT + 1 - len(base) - 1) + b"\n" + b"#" * draw(st.integers(0, 9))
    elif kind == "at_limit":
        data = base + b"#" * (LIMIT - len(base) - 1) + b"\n"
    elif kind == "under_limit_steps":
        data = _padded_with_steps(seed, draw(st.integers(LIMIT - 50_000, LIMIT)))
    elif kind == "under_limit_about":
        data = _padded_about(seed, draw(st.integers(LIMIT - 50_000, LIMIT)))
    elif kind == "long_line":
        data = base + b"about2: " + b"x" * draw(st.sampled_from((10_000, 100_000, 900_000)))
    elif kind == "nul_padding":
        data = base + b"\x00" * draw(st.integers(1, 1_000))
    else:
        data = b"---\n" + base + b"\n---\n" + base
    return SpecFile(data, (f"seed {seed}", f"bytes: {kind}", f"{len(data):,} bytes"))


def _padded_with_steps(seed: str, size: int) -> bytes:
    """The seed with many top-level steps in front of its forward, `size` bytes or just under
    (written as JSON, which is YAML too, because the C encoder makes a megabyte quickly)."""
    tree = load_seed(seed)
    inputs = tree.get("inputs") or {"x": 1.0}
    tree["inputs"] = inputs
    source = next(iter(inputs))
    forward = tree["forward"] if isinstance(tree["forward"], list) else []
    tree["forward"] = forward
    base = len(json.dumps(tree, ensure_ascii=False).encode("utf-8"))
    steps: list[str] = []
    while True:
        step = f"pad_{len(steps)} = {source} * 1.0"
        cost = len(step) + 4  # the quotes, the comma and the space
        if base + cost > size:
            break
        steps.append(step)
        base += cost
    tree["forward"] = steps + forward
    return json.dumps(tree, ensure_ascii=False).encode("utf-8")


def _padded_about(seed: str, size: int) -> bytes:
    """The seed with an `about` long enough to make the file exactly `size` bytes."""
    tree = load_seed(seed)
    tree["about"] = ""
    head = emit(tree, "block", RawSlots()).encode("utf-8")
    filler = max(0, size - len(head))
    return head.replace(b"about: ''", b"about: '" + b"a" * filler + b"'", 1)


def spec_files(gentle_share: int = 1) -> st.SearchStrategy[SpecFile]:
    """The fuzz input: tree mutations, gentle ones (mostly valid, so the run is exercised), and
    byte mutations."""
    return st.one_of(
        mutated_specs(),
        *[mutated_specs(GENTLE_MUTATORS, most=2)] * gentle_share,
        byte_specs(),
    )
