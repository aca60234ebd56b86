"""Spec files for the fuzz tests (tests/test_fuzz.py), part 1: what every generator starts from.

The seeds (the valid specs in specs/, loaded as plain YAML data), the spec language's vocabulary
and the odd values the mutators splice in (names that collide, numbers at the edges, odd indices,
operators, literals and tags), SpecFile (one generated file and its story), helpers over the
plain-data tree, and writing a tree back as YAML or JSON.

The generators are in tests/helpers/fuzztrees.py (tree mutations) and tests/helpers/fuzzbytes.py
(byte mutations, and `spec_files`, the mix the fuzz tests draw from). Nothing here runs
gradexplain.
"""

from __future__ import annotations

import json
import math
import re
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

# The spec language's vocabulary (DESIGN section 3 and gradexplain/language/catalogue), written out
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


IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


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
            return IDENTIFIER.sub(lambda match: new if match.group(0) == old else match.group(0),
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

