"""Spec files for the fuzz tests (tests/test_fuzz.py), part 2: tree mutations.

A seed (tests/helpers/fuzzseeds.py) is loaded with yaml.safe_load and its plain data changed: a
value of the wrong type, a key deleted or added, a name renamed everywhere to a unicode, reserved
or builtin name, odd shapes, huge and non-finite numbers, deep nesting, explicit YAML tags, edited
forward steps, thousands of steps, parts grafted from another seed, interventions, captures and
backward targets added or changed; usually several changes at once, written back as YAML (block
or flow style) or JSON.

Every drawn file carries its story (what was done to which seed), which the tests `note()` so a
failure reads as the list of changes that led to it. Nothing here runs gradexplain.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

from hypothesis import strategies as st

from tests.helpers.fuzzseeds import (
    DEEP_LEVELS,
    FUNCTIONS,
    IDENTIFIER,
    KNOWN_KEYS,
    LAYER_KINDS,
    ODD_ATTRIBUTES,
    ODD_INDICES,
    ODD_LITERALS,
    ODD_NUMBERS,
    ODD_OPERATORS,
    ODD_SHAPES,
    ODD_TAGGED,
    SEED_NAMES,
    STEP_COUNTS,
    KeyPath,
    RawSlots,
    SpecFile,
    Tree,
    all_paths,
    any_values,
    defined_names,
    emit,
    flow_text,
    get_at,
    is_step_path,
    load_seed,
    odd_names,
    rename_everywhere,
    set_at,
    show_path,
    step_lists,
)

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
        found = IDENTIFIER.findall(expr)
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


