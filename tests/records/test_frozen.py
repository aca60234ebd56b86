"""`quick_init` (gradexplain/records/frozen.py): a frozen dataclass built through it is the same
record the dataclass's own `__init__` builds, takes the same arguments, refuses the same wrong
ones and stays frozen; a dataclass it cannot take as plain keeps its own `__init__`."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from gradexplain.records.frozen import quick_init
from gradexplain.records.trace import Arg, Event, TensorValue


@dataclasses.dataclass(frozen=True)
class Plain:
    name: str
    count: int
    note: str | None = None
    flag: bool = False


@quick_init
@dataclasses.dataclass(frozen=True)
class Quick:
    name: str
    count: int
    note: str | None = None
    flag: bool = False


@pytest.mark.parametrize(("args", "kwargs"), [
    (("a", 1), {}), (("a", 1, "n"), {}), (("a", 1, "n", True), {}),
    (("a",), {"count": 2, "flag": True}), ((), {"name": "b", "count": 3, "note": "x"}),
])
def test_the_same_record_as_the_dataclass_builds(args: tuple[object, ...],
                                                  kwargs: dict[str, object]) -> None:
    quick = Quick(*args, **kwargs)  # type: ignore[arg-type]
    plain = Plain(*args, **kwargs)  # type: ignore[arg-type]
    assert dataclasses.asdict(quick) == dataclasses.asdict(plain)
    again = Quick(*args, **kwargs)  # type: ignore[arg-type]
    assert quick == again and hash(quick) == hash(again)
    assert "stored" in Quick.__init__.__code__.co_varnames  # the quick __init__


@pytest.mark.parametrize(("args", "kwargs"), [
    (("a",), {}), (("a", 1, "n", True, "extra"), {}), (("a", 1), {"colour": "red"}),
    (("a", 1), {"name": "again"}),
])
def test_the_same_wrong_arguments_are_refused(args: tuple[object, ...],
                                              kwargs: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        Plain(*args, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Quick(*args, **kwargs)  # type: ignore[arg-type]


def test_still_frozen_and_replaced_and_pickled_as_before() -> None:
    record = Quick("a", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.name = "b"  # type: ignore[misc]
    changed = dataclasses.replace(record, count=5)
    assert (changed.name, changed.count, changed.note) == ("a", 5, None)
    assert pickle.loads(pickle.dumps(Arg("x", TensorValue((1,), "float32", [1.0]), 3))) == Arg(
        "x", TensorValue((1,), "float32", [1.0]), 3)


def test_a_record_of_the_capture_is_built_quickly_and_alike() -> None:
    event = Event(0, "backward", 1, "node", "n3", "MulBackward0", (Arg("grad", None, None),),
                  "n3")
    assert event.user is None and event.returned is None and not event.changed
    assert Event.__init__.__qualname__ == "Event.__init__"
    assert "stored" in Event.__init__.__code__.co_varnames  # the quick one, not the dataclass's


@pytest.mark.parametrize("options", [{"kw_only": True}, {}])
def test_a_dataclass_it_cannot_take_as_plain_keeps_its_own_init(
        options: dict[str, bool]) -> None:
    made: type[Any]
    if options:
        made = dataclasses.make_dataclass("KeywordOnly", [("name", str)], frozen=True,
                                          **options)  # type: ignore[arg-type]
    else:
        made = dataclasses.make_dataclass(
            "Factory", [("items", list, dataclasses.field(default_factory=list))], frozen=True)
    own = made.__init__
    assert quick_init(made).__init__ is own

    @dataclasses.dataclass(frozen=True)
    class Checked:
        count: int

        def __post_init__(self) -> None:
            if self.count < 0:
                raise ValueError("negative")

    before = Checked.__init__
    assert quick_init(Checked).__init__ is before
    with pytest.raises(ValueError):
        Checked(-1)
