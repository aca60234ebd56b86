"""Bad specs: every class of error exits 2 with one line naming file, line:column, key path and what
was expected, never a traceback. Each case runs the real command line in a subprocess."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers.badspecs import Case, assert_one_clear_line
from tests.helpers.cli import run_cli

GOOD_HEAD = "inputs:\n  x: {value: 1.0, requires_grad: true}\n"
YAML_SYNTAX = 'forward: ["y = x * 2"\nbackward: y\n'


# An Embedding layer looking up the rows an input holds (`{indices}`) of a `{rows}`-row weight.
EMBEDDING = ("inputs:\n  idx: {indices}\nlayers:\n  emb: {{Embedding: {{num_embeddings: {rows}, "
             "embedding_dim: 2}}}}\nforward: ['e = emb(idx)', 's = sum(e)']\nbackward: s\n")

CASES = [
    # --- YAML itself
    Case("yaml_syntax", YAML_SYNTAX, "2:1", "", ("YAML error",)),
    Case("yaml_bad_indent", "inputs:\n  x: 1\n y: 2\nforward: ['a = x']\n", "3:2", "",
         ("YAML error",)),
    Case("duplicate_key", GOOD_HEAD + "forward: ['y = x * 2']\nforward: ['y = x']\nbackward: y\n",
         "4:1", "forward", ("'forward' appears twice", "first on line 3")),
    Case("empty_file", "", "", "", ("the file is empty",)),
    Case("only_comments", "# nothing here\n", "", "", ("the file is empty",)),
    Case("empty_document", "---\n...\n", "", "", ("the document is empty",)),
    Case("null_document", "null\n", "", "", ("the document is empty",)),
    Case("top_level_list", "- 1\n- 2\n", "1:1", "", ("must be a mapping", "found a list")),
    Case("top_level_scalar", "hello\n", "1:1", "", ("must be a mapping", "'hello'")),
    # --- keys and types
    Case("unknown_key", GOOD_HEAD + "forwrd: ['y = x * 2']\nforward: ['y = x * 2']\nbackward: y\n",
         "3:1", "forwrd", ("unknown key 'forwrd'", "did you mean 'forward'?")),
    Case("unknown_layer_argument",
         GOOD_HEAD + "layers:\n  l: {Linear: {in_featurs: 1, out_features: 1}}\n"
         "forward: ['y = l(x)']\nbackward: y\n",
         "4:16", "layers.l.Linear.in_featurs", ("did you mean 'in_features'?",)),
    Case("missing_forward", GOOD_HEAD + "backward: x\n", "1:1", "", ("missing the key 'forward'",)),
    # A name heads every output (validate's summary line, walk's header, a report's heading):
    # a line break in it forged lines of their own there ("error: ...", a markdown heading).
    Case("name_with_newline", 'name: "two\\nerror: FAKE LINE"\n' + GOOD_HEAD
         + "forward: ['y = x * 2']\nbackward: y\n", "1:7", "name",
         ("the name is one line of text", "2 lines")),
    # validate passed it, and walk failed in torch's words ("Overflow when unpacking long").
    Case("argument_of_a_layer_without_any", GOOD_HEAD + "layers:\n  l: {Identity: {foo: 1}}\n"
         "forward: ['y = l(x)']\nbackward: y\n", "4:18", "layers.l.Identity.foo",
         ("unknown key 'foo' (no key is allowed here)",)),
    Case("option_past_int64", GOOD_HEAD.replace("1.0", "[1.0, 2.0]")
         + "forward: ['y, w = chunk(x, 99999999999999999999)', 'z = sum(y)']\nbackward: z\n",
         "3:19", "forward[0]",
         ("chunk: chunks must fit in int64", "got 99,999,999,999,999,999,999")),
    Case("wrong_type_bool",
         "inputs:\n  x: {value: 1.0, requires_grad: 'yes'}\nforward: ['y = x * 2']\nbackward: y\n",
         "2:'yes'", "inputs.x.requires_grad", ("expected true or false", "the text 'yes'")),
    Case("wrong_type_shape",
         "inputs:\n  x: {randn: three, requires_grad: true}\nforward: ['y = sum(x)']\n"
         "backward: y\n",
         "2:three", "inputs.x.randn", ("expected a shape",)),
    Case("missing_layer_argument",
         GOOD_HEAD + "layers:\n  l: Linear\nforward: ['y = l(x)']\nbackward: y\n",
         "4:Linear", "layers.l", ("Linear needs the argument 'in_features'",)),
    Case("wrong_type_layer_argument",
         GOOD_HEAD + "layers:\n  l: {Linear: {in_features: 2.5, out_features: 1}}\n"
         "forward: ['y = l(x)']\nbackward: y\n",
         "4:2.5", "layers.l.Linear.in_features", ("expected a whole number", "2.5")),
    Case("ragged_literal",
         "inputs:\n  x:\n    value: [[1.0, 2.0], [3.0]]\n    requires_grad: true\n"
         "forward: ['y = sum(x)']\nbackward: y\n",
         "3:[3.0]", "inputs.x.value[1]", ("same shape", "[1]", "[2]")),
    Case("step_not_text", GOOD_HEAD + "forward: [42]\nbackward: x\n", "3:11", "forward[0]",
         ("expected a step",)),
    Case("step_not_assignment", GOOD_HEAD + "forward: ['x * 2']\nbackward: x\n", "3:x * 2",
         "forward[0]", ("`name = expression`",)),
    # --- shapes
    Case("linear_in_features",
         "inputs:\n  x: {randn: [3], requires_grad: true}\n"
         "layers:\n  l: {Linear: {in_features: 2, out_features: 1}}\n"
         "forward: ['y = l(x)']\nbackward: y\n",
         "5:l(x)", "forward[0]", ("'y = l(x)'", "Linear(in_features=2)", "got shape [3]")),
    Case("matmul_shapes",
         "inputs:\n  a: {randn: [2, 3], requires_grad: true}\n  b: {randn: [2, 3]}\n"
         "forward: ['y = a @ b', 's = sum(y)']\nbackward: s\n",
         "4:a @ b", "forward[0]", ("'y = a @ b'", "[2, 3] by [2, 3]", "inner sizes 3 and 2")),
    Case("broadcast_shapes",
         "inputs:\n  a: {randn: [2, 3], requires_grad: true}\n  b: {randn: [4]}\n"
         "forward: ['y = a + b', 's = sum(y)']\nbackward: s\n",
         "4:a + b", "forward[0]", ("'y = a + b'", "[2, 3] and [4] do not broadcast")),
    Case("literal_weight_shape",
         GOOD_HEAD + "layers:\n  l: {Linear: {in_features: 2, out_features: 1}, "
         "weight: [[1.0, 2.0, 3.0]]}\nforward: ['y = l(x)']\nbackward: y\n",
         "4:[[1.0", "layers.l.weight",
         ("Linear.weight has shape [1, 2]", "literal has shape [1, 3]")),
    Case("backward_non_scalar",
         "inputs:\n  x: {randn: [2], requires_grad: true}\nforward: ['y = x * 3']\nbackward: y\n",
         "4:11", "backward", ("shape [2]", "needs `gradient:`", "only for scalar outputs")),
    Case("gradient_shape",
         "inputs:\n  x: {randn: [2], requires_grad: true}\nforward: ['y = x * 3']\n"
         "backward: {of: y, gradient: [1.0, 2.0, 3.0]}\n",
         "4:[1.0", "backward.gradient", ("gradient has shape [3]", "'y' has shape [2]")),
    # --- names
    Case("undefined_name", GOOD_HEAD + "forward: ['y = x * w']\nbackward: y\n", "3:w'",
         "forward[0]", ("unknown name 'w'", "at this point: x")),
    Case("undefined_name_suggestion", GOOD_HEAD + "forward: ['y = x * xx']\nbackward: y\n",
         "3:xx", "forward[0]", ("unknown name 'xx'", "did you mean 'x'?")),
    Case("defined_twice_step", GOOD_HEAD + "forward: ['y = x * 2', 'y = y * 3']\nbackward: y\n",
         "3:y = y", "forward[1]", ("'y' is defined twice", "as a step at 3:12")),
    Case("defined_twice_param_and_layer",
         GOOD_HEAD + "modules:\n  m:\n    params: {w: [1.0]}\n    layers: {w: Sigmoid}\n"
         "    forward: {args: [a], steps: ['b = w(a)']}\nforward: ['y = m(x)']\nbackward: y\n",
         "6:w:", "modules.m.layers.w", ("'w' is defined twice", "as a parameter at 5:14")),
    Case("undefined_backward", GOOD_HEAD + "forward: ['y = x * 2']\nbackward: yy\n", "4:11",
         "backward", ("'yy', which is not a tensor of this spec", "did you mean 'y'?")),
    Case("cycle", GOOD_HEAD + "forward: ['a = b * 2', 'b = a * 3', 'y = b + x']\nbackward: y\n",
         "3:16", "forward[0]", ("the steps form a cycle: a -> b -> a",)),
    Case("used_before_defined", GOOD_HEAD + "forward: ['y = b * 2', 'b = x * 3']\nbackward: y\n",
         "3:16", "forward[0]", ("'b' is used before step 2 defines it",)),
    Case("reserved_name", GOOD_HEAD + "layers:\n  sum: Sigmoid\nforward: ['y = sum(x)']\n"
         "backward: y\n", "4:sum", "layers.sum", ("'sum' is a function of the step language",)),
    # Python reads a name in its NFKC form: `ｘ` would be the input `x`, silently
    # YAML 1.1 reads `010` as 8 and `1:20` as 80, silently
    Case("octal_number",
         "inputs:\n  x: {value: [1.0, 010], requires_grad: true}\nforward: ['y = sum(x)']\n"
         "backward: y\n", "2:010]", "inputs.x.value[1]", ("'010' would be read as 8",)),
    Case("base_60_number",
         "inputs:\n  x: {value: [1:20], requires_grad: true}\nforward: ['y = sum(x)']\n"
         "backward: y\n", "2:1:20", "inputs.x.value[0]", ("'1:20' would be read as 80",)),
    Case("look_alike_input",
         GOOD_HEAD + "  \uff58: {value: 10.0, requires_grad: true}\n"
         "forward: ['y = \uff58 * \uff58']\nbackward: y\n",
         "3:\uff58", "inputs.\uff58", ("is read by Python as 'x'",)),
    Case("look_alike_in_a_step", GOOD_HEAD + "forward: ['\ufb01 = x * 2']\nbackward: x\n",
         "3:\ufb01", "forward[0]", ("is read by Python as 'fi'",)),
    Case("module_attribute_name",
         GOOD_HEAD + "modules:\n  m:\n    params: {forward: [1.0]}\n"
         "    forward: {args: [a], steps: ['b = a * 2']}\nforward: ['y = m(x)']\nbackward: y\n",
         "5:forward", "modules.m.params.forward", ("attribute of every torch.nn.Module",)),
    # --- unknown functions and layers
    Case("unknown_function", GOOD_HEAD + "forward: ['y = sigmod(x)']\nbackward: y\n", "3:16",
         "forward[0]", ("unknown function, layer or module 'sigmod'", "did you mean 'sigmoid'?")),
    Case("unknown_layer", GOOD_HEAD + "layers:\n  l: {Linaer: {in_features: 1, out_features: 1}}\n"
         "forward: ['y = l(x)']\nbackward: y\n", "4:Linaer", "layers.l.Linaer",
         ("unknown layer 'Linaer'", "did you mean 'Linear'?")),
    Case("unknown_function_argument", GOOD_HEAD + "forward: ['y = sum(x, dimm=0)']\nbackward: y\n",
         "3:16", "forward[0]", ("sum has no argument 'dimm'", "did you mean 'dim'?")),
    # --- bounds
    Case("tensor_too_large",
         "inputs:\n  x: {randn: [1000000, 1000000], requires_grad: true}\n"
         "forward: ['y = sum(x)']\nbackward: y\n",
         "2:[1000000", "inputs.x.randn", ("1,000,000,000,000 elements", "limit is 10,000,000")),
    Case("step_result_too_large",
         "inputs:\n  x: {randn: [3000, 1], requires_grad: true}\n"
         "forward: ['y = x * reshape(x, 1, 3000)', 'z = reshape(y, 9000000, 1) * "
         "reshape(y, 1, 9000000)', 's = sum(z)']\nbackward: s\n",
         "3:z =", "forward[1]", ("'z' would have shape [9000000, 9000000]", "limit is 10,000,000")),
    Case("all_tensors_too_large",
         "inputs:\n  x: {randn: [3000, 3000], requires_grad: true}\n"
         "forward: ['y = x * 2', 'z = y * 2', 's = sum(z)']\nbackward: s\n",
         "3:z =", "forward[1]",
         ("with 'z' ([3000, 3000])", "27,000,000 elements in all", "limit is 20,000,000")),
    Case("nothing_to_differentiate", GOOD_HEAD + "forward: ['y = x * 2']\n", "1:1", "",
         ("nothing to differentiate",)),
    # --- values written in the spec that torch will refuse
    Case("embedding_index_past_its_rows", EMBEDDING.format(indices="{value: [0, 7], "
                                                             "dtype: int64}", rows=3),
         "5:emb(", "forward[0]", ("value error", "rows 0 to 2", "'idx' holds the index 7")),
    Case("embedding_index_negative", EMBEDDING.format(indices="{value: [[1, -1]], "
                                                          "dtype: int64}", rows=3),
         "5:emb(", "forward[0]", ("rows 0 to 2", "the index -1")),
    Case("embedding_ones_with_one_row", EMBEDDING.format(indices="{ones: [2], dtype: int64}",
                                                         rows=1),
         "5:emb(", "forward[0]", ("rows 0 to 0", "the index 1")),
    # A whole number for an int64 tensor is read as written, not through a float: 2**63 - 1
    # was "9.22337e+18" (2**63 as a float), refused as past 2**63, which it is not.
    Case("embedding_index_int64_largest", EMBEDDING.format(
        indices=f"{{value: [0, {2**63 - 1}], dtype: int64}}", rows=3),
         "5:emb(", "forward[0]", ("rows 0 to 2", f"the index {2**63 - 1:,}")),
    Case("int64_value_past_int64", EMBEDDING.format(
        indices=f"{{value: [0, {2**63}], dtype: int64}}", rows=3),
         "2:20", "inputs.idx.value[1]", ("below 2**63 in size", f"got {2**63:,}")),
]


@pytest.mark.parametrize("indices", [[0, 2], [0, 3], [-1], [[2, 1], [0, 5]], [],
                                     [2**63 - 1]])
def test_validate_refuses_embedding_indices_exactly_where_torch_does(
        indices: list[object], write_spec: Callable[[str], Path]) -> None:
    try:
        torch.nn.Embedding(3, 2)(torch.tensor(indices, dtype=torch.int64))
        torch_refuses = False
    except (IndexError, RuntimeError):
        torch_refuses = True
    text = EMBEDDING.format(indices=f"{{value: {indices}, dtype: int64}}", rows=3)
    result = run_cli("validate", str(write_spec(text)))
    assert result.code == (2 if torch_refuses else 0), result


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_spec_is_one_clear_line(case: Case, write_spec: Callable[[str], Path]) -> None:
    assert_one_clear_line(case, write_spec(case.text))


def test_a_yaml_error_passes_on_what_the_parser_says(write_spec: Callable[[str], Path]) -> None:
    # PyYAML's words (libyaml's where PyYAML has it), said by PyYAML here, not written down.
    said: list[str] = []
    for loader in (yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        with pytest.raises(yaml.MarkedYAMLError) as caught:
            yaml.compose(YAML_SYNTAX, Loader=loader)
        said.append(f"{caught.value.context}; {caught.value.problem}")
    path = write_spec(YAML_SYNTAX)
    result = run_cli("validate", str(path))
    assert result.code == 2, result
    assert result.stderr.startswith(f"error: {path}:2:1: YAML error: "), result.stderr
    assert any(f"YAML error: {words}" in result.stderr for words in said), (said, result.stderr)


# --- anything that would run code is refused, and nothing ran --------------------------------

TOUCH = "__import__('pathlib').Path('{marker}').touch()"


@dataclass(frozen=True)
class Payload:
    """A spec that would create the file {marker} if any part of it ran as Python: `yaml` is
    the way in (a YAML tag that a full loader builds objects from, or a step that Python's eval
    would run), and `live` is that unsafe way, used by the test to show the payload is real."""

    id: str
    template: str
    where: str  # LINE:COL where the error points
    says: str
    live: str  # "yaml": yaml.unsafe_load creates the marker; "eval": eval(step) does


CODE_PAYLOADS = [
    Payload("python_object_apply",
            "inputs:\n  x: !!python/object/apply:os.system ['touch {marker}']\n"
            "forward: ['y = x * 2']\nbackward: y\n", "2:6", "!!python/object/apply", "yaml"),
    Payload("python_object_apply_builtins_exec",
            'name: !!python/object/apply:builtins.exec ["' + TOUCH + '"]\n'
            + GOOD_HEAD + "forward: ['y = x * 2']\nbackward: y\n", "1:7",
            "!!python/object/apply:builtins.exec", "yaml"),
    Payload("python_object_apply_in_a_list",
            GOOD_HEAD + "forward: ['y = x * 2', !!python/object/apply:subprocess.call "
            "[[touch, '{marker}']]]\nbackward: y\n", "3:24", "!!python/object/apply", "yaml"),
    Payload("python_object_new_as_a_key",
            GOOD_HEAD + "? !!python/object/apply:os.system ['touch {marker}']\n: 1\n"
            "forward: ['y = x * 2']\nbackward: y\n", "3:3", "!!python/object/apply", "yaml"),
    Payload("dunder_import",
            GOOD_HEAD + 'forward: ["y = ' + TOUCH + '"]\nbackward: y\n',
            "3:16", "'__import__' is refused", "eval"),
    Payload("dunder_chain",
            GOOD_HEAD + "forward: ['y = (1).__class__.__base__.__subclasses__()']\nbackward: y\n",
            "3:16", "'__subclasses__' is refused", "none"),
    Payload("builtin_open",
            GOOD_HEAD + "forward: ['y = open(\"{marker}\", \"w\")']\nbackward: y\n",
            "3:21", "text literals are not in the step language", "eval"),
    Payload("exec_call", GOOD_HEAD + "forward: ['y = exec(x)']\nbackward: y\n", "3:16",
            "unknown function, layer or module 'exec'", "none"),
    Payload("attribute_call", GOOD_HEAD + "forward: ['y = x.exp()']\nbackward: y\n", "3:16",
            "attribute access '.exp'", "none"),
    Payload("lambda", GOOD_HEAD + "forward: ['y = (lambda: 1)()']\nbackward: y\n", "3:16",
            "only a name can be called", "none"),
    Payload("walrus", GOOD_HEAD + "forward: ['y = (z := x)']\nbackward: y\n", "3:17",
            "NamedExpr would run code and is refused", "none"),
    Payload("comprehension", GOOD_HEAD + "forward: ['y = [i for i in x]']\nbackward: y\n",
            "3:16", "comprehensions are not in the step language", "none"),
    Payload("second_statement", GOOD_HEAD + "forward: ['y = x; import os']\nbackward: y\n",
            "3:12", "a step is `name = expression`", "none"),
]


def run_unsafely(payload: Payload, text: str, marker: Path) -> None:
    """What an unsafe tool would do with the spec: build its YAML tags, or eval its steps."""
    if payload.live == "yaml":
        yaml.unsafe_load(text)
    elif payload.live == "eval":
        for step in yaml.safe_load(text)["forward"]:
            eval(step.split("=", 1)[1])  # the unsafe way, on purpose: the payload is live


@pytest.mark.parametrize("payload", CODE_PAYLOADS, ids=[item.id for item in CODE_PAYLOADS])
def test_code_is_refused_and_never_runs(
    payload: Payload, tmp_path: Path, write_spec: Callable[[str], Path],
) -> None:
    marker = tmp_path / "pwned"
    text = payload.template.replace("{marker}", str(marker))
    path = write_spec(text)
    for command in ("validate", "walk"):
        result = run_cli(command, str(path))
        assert result.code == 2, result
        assert "Traceback" not in result.stderr
        assert result.stderr.startswith(f"error: {path}:{payload.where}: "), result.stderr
        assert payload.says in result.stderr
        assert not marker.exists()
    # The payload is real: run the unsafe way, it creates the file.
    if payload.live != "none":
        run_unsafely(payload, text, marker)
        assert marker.exists()


@pytest.mark.parametrize(("kind", "text", "where"), [
    ("input", "inputs:\n  open: {value: 1.0, requires_grad: true}\n"
              "forward: ['y = open * 2']\nbackward: y\n", "2:3"),
    ("step", GOOD_HEAD + "forward: ['print = x * 2', 'y = print * 3']\nbackward: y\n", "3:12"),
    ("module", GOOD_HEAD + "modules:\n  exec:\n    forward: {args: [a], steps: ['b = a * 2']}\n"
               "forward: ['y = exec(x)']\nbackward: y\n", "4:3"),
    ("argument", GOOD_HEAD + "modules:\n  m:\n    forward: {args: [input], steps: "
                 "['b = input * 2']}\nforward: ['y = m(x)']\nbackward: y\n", "4:3"),
    ("parameter", GOOD_HEAD + "params: {divmod: [1.0]}\nforward: ['y = x * divmod']\n"
                  "backward: y\n", "3:10"),
    ("layer", GOOD_HEAD + "layers:\n  getattr: Sigmoid\nforward: ['y = getattr(x)']\n"
              "backward: y\n", "4:3"),
])
def test_names_shadowing_python_builtins_are_refused(
    kind: str, text: str, where: str, write_spec: Callable[[str], Path],
) -> None:
    import builtins

    path = write_spec(text)
    result = run_cli("validate", str(path))
    assert result.code == 2, result
    assert result.stderr.startswith(f"error: {path}:{where}: refused at "), result.stderr
    name = result.stderr.split("'")[1]
    assert hasattr(builtins, name)  # the test's premise: the name is one of Python's
    assert f"{kind} '{name}' would shadow the Python builtin" in result.stderr


def test_a_spec_cannot_name_python_code(write_spec: Callable[[str], Path]) -> None:
    # Python models run only when named on the command line; a spec has no key for one.
    path = write_spec("python: os:system\n" + GOOD_HEAD + "forward: ['y = x']\nbackward: y\n")
    result = run_cli("walk", str(path))
    assert result.code == 2
    assert f"error: {path}:1:1: schema error at python: unknown key 'python'" in result.stderr


def test_binary_junk_is_not_a_spec(tmp_path: Path) -> None:
    path = tmp_path / "junk.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    result = run_cli("validate", str(path))
    assert result.code == 2
    assert "Traceback" not in result.stderr
    assert "not UTF-8 text" in result.stderr


def test_missing_file(tmp_path: Path) -> None:
    # No YAML was read, so it is no YAML error (tests/cli/test_bad_input.py has the rest).
    path = tmp_path / "nope.yaml"
    result = run_cli("validate", str(path))
    assert result.code == 2
    assert result.stderr.strip() == f"error: {path}: the file does not exist"


def test_file_size_bound(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("about: '" + "a" * 1_100_000 + "'\n", encoding="utf-8")
    result = run_cli("validate", str(path))
    assert result.code == 2
    assert "a spec may be at most 1,000,000 bytes" in result.stderr


def test_alias_bomb_is_bounded(write_spec: Callable[[str], Path]) -> None:
    # Each level repeats the previous one nine times: 9**9 values if expanded.
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for level in range(1, 10):
        ref = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([ref] * 9)}]")
    path = write_spec("\n".join(lines) + "\nforward: ['y = x']\n")
    result = run_cli("validate", str(path))
    assert result.code == 2
    assert "Traceback" not in result.stderr
    assert "more than 200,000 values" in result.stderr


YAML_DEPTH = 64  # the documented bound: values inside at most 64 lists and mappings


def _flow(depth: int, closed: bool = True) -> tuple[str, str]:
    """`about: [[[...` and where its first value nested too deeply starts: the bracket that
    opens inside 64 others (the top-level mapping is the first)."""
    text = "about: " + "[" * depth + ("]" * depth if closed else "") + "\nforward: ['y = x']\n"
    return text, f"1:{len('about: ') + YAML_DEPTH + 1}"


def _block_mappings(depth: int) -> tuple[str, str]:
    lines = [" " * level + f"k{level}:" for level in range(depth)]
    return "\n".join(lines) + "\n" + " " * depth + "v\n", f"{YAML_DEPTH + 1}:{YAML_DEPTH + 1}"


def _block_sequences(depth: int) -> tuple[str, str]:
    # `- - - x` nests one list per dash on a single line, the first inside the top-level
    # mapping: the 65th dash (column 3 + 2 * 64) starts a list inside 65 others.
    return "forward:\n  " + "- " * depth + "x\n", f"2:{3 + 2 * YAML_DEPTH}"


@pytest.mark.parametrize("make, depth", [
    (_flow, 5_000),  # libyaml since PyYAML 6.0.4 refuses 1,000 levels in its own words
    (lambda depth: _flow(depth, closed=False), 30_000),  # 60 KB: once a segfault
    (_flow, YAML_DEPTH + 1),
    (_block_mappings, 2_000),
    (_block_sequences, 1_500),
], ids=["flow-5000", "flow-30000-unclosed", "flow-65", "block-mappings", "block-sequences"])
@pytest.mark.parametrize("loader", ["libyaml", "pure-python"])
def test_deep_nesting_is_our_one_line(make: Callable[[int], tuple[str, str]], depth: int,
                                      loader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever PyYAML is installed (with libyaml or without, with a nesting limit of its own
    or none), deep nesting is refused before anything is composed, in our words, at the first
    value past the bound."""
    from gradexplain.errors import SpecLimitError
    from gradexplain.language import yamlio

    if loader == "pure-python":
        monkeypatch.setattr(yamlio, "_Loader", yaml.SafeLoader)
    text, where = make(depth)
    with pytest.raises(SpecLimitError) as raised:
        yamlio.parse_document(text, "deep.yaml")
    line = raised.value.one_line()
    assert line.startswith(f"deep.yaml:{where}: too large"), line
    assert "nested too deeply" in line and f"more than {YAML_DEPTH} levels" in line, line


def test_deep_nesting_through_the_command_line(write_spec: Callable[[str], Path]) -> None:
    text, where = _flow(5_000)
    path = write_spec(text)
    result = run_cli("validate", str(path))
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {path}:{where}: too large at about[0][0]")
    assert "nested too deeply" in result.stderr


def test_nesting_at_the_bound_is_read() -> None:
    from gradexplain.language.yamlio import parse_document

    document = parse_document("about: " + "[" * (YAML_DEPTH - 1) + "]" * (YAML_DEPTH - 1),
                              "ok.yaml")
    value = document.data["about"]
    for _ in range(YAML_DEPTH - 2):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []


def test_an_alias_cannot_smuggle_depth_past_the_bound() -> None:
    """Each level is shallow as written, but the alias puts a 40-deep anchor under 40 more."""
    from gradexplain.errors import SpecLimitError
    from gradexplain.language.yamlio import parse_document

    text = ("a: &deep " + "[" * 40 + "]" * 40 + "\n"
            "b: " + "[" * 40 + "*deep" + "]" * 40 + "\n")
    with pytest.raises(SpecLimitError, match="nested too deeply"):
        parse_document(text, "alias.yaml")


def test_several_files_report_each(write_spec: Callable[[str, str], Path]) -> None:
    bad = write_spec(GOOD_HEAD + "forward: ['y = x * w']\nbackward: y\n", "bad.yaml")
    good = Path("specs/two_modules.yaml")
    result = run_cli("validate", str(good), str(bad))
    assert result.code == 2
    assert result.stdout.startswith("specs/two_modules.yaml: ok")
    assert result.stderr.startswith(f"error: {bad}:3:20")
