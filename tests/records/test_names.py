"""The naming rule on its own (records/names.py, no torch): short names qualified only as much as
a walk's other names need, numbered suffixes for names made again, and a walk saved before the
table existed still named as it was."""

from __future__ import annotations

from gradexplain.records.codec import from_data, to_data
from gradexplain.records.names import Naming, distinct, latex_of
from gradexplain.records.walk import Walk

NAMES = ["x", "y", "module.p", "module2.t", "net.conv1.weight", "net.conv2.weight",
         "net.fc.weight", "net.fc.bias", "encoder.0.weight", "head.weight", "m.y@2", "z:mul",
         "mul#3"]


def test_a_name_is_qualified_only_as_much_as_needed() -> None:
    naming = Naming.of(NAMES)
    short = {name: naming.short(name) for name in NAMES}
    assert short["module.p"] == "p" and short["module2.t"] == "t"
    assert short["net.conv1.weight"] == "conv1.weight"
    assert short["net.fc.weight"] == "fc.weight"
    assert short["net.fc.bias"] == "bias"  # the only bias
    assert short["encoder.0.weight"] == "encoder.0.weight"  # never a bare `0.weight`
    assert short["m.y@2"] == "y@2"
    assert short["z:mul"] == "z:mul" and short["mul#3"] == "mul#3"
    assert len(set(short.values())) == len(NAMES)


def test_a_top_level_name_keeps_its_own_and_the_qualified_one_gives_way() -> None:
    naming = Naming.of(["t", "module2.t", "a.b.t"])
    assert [naming.short(name) for name in ("t", "module2.t", "a.b.t")] == [
        "t", "module2.t", "b.t"]


def test_a_name_outside_the_table_is_shown_whole() -> None:
    """Chain-rule descriptions are built from short names already (`conv1.weightᵀ`)."""
    naming = Naming.of(NAMES)
    assert naming.short("conv1.weightᵀ") == "conv1.weightᵀ"


def test_a_walk_saved_without_a_table_is_named_as_before() -> None:
    assert Naming().short("module2.l.weight") == "weight"
    assert Naming(whole=True).short("head.weight") == "head.weight"
    old = to_data(Walk("s.yaml", "s", None, "2.13.0", (), (), 0))
    del old["short_names"]
    assert from_data(Walk, old).naming == Naming()


def test_the_table_travels_with_the_walk() -> None:
    naming = Naming.of(NAMES)
    walk = Walk("s.yaml", "s", None, "2.13.0", (), (), 0, short_names=naming.shorts)
    assert from_data(Walk, to_data(walk)).naming.short("net.fc.weight") == "fc.weight"


def test_names_made_again_are_numbered_in_order() -> None:
    found = distinct([(1, "out:mul"), (2, "out:mul"), (3, "h:add"), (4, "out:mul")],
                     taken={"h:add"})
    assert found == {1: "out:mul", 2: "out:mul@2", 3: "h:add@2", 4: "out:mul@3"}


def test_latex_reads_a_call_suffix_only_at_the_end() -> None:
    assert latex_of("y@2") == "y^{(2)}"
    assert "^{(" not in latex_of("cell:tanh@2:mul")
