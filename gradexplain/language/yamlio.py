"""Parsing a spec's text as YAML, safely, into plain data plus the place every value came from.

We walk PyYAML's composed node tree ourselves instead of calling a constructor on it. That gives us:
only the standard scalar, sequence and mapping tags (a `!!python/...` tag is refused before anything
is constructed), keys taken as written (`on:` stays the text "on", not YAML 1.1's True), duplicate
keys reported instead of silently overwritten, bounds on size and depth, and a line:column for every
key and value so later stages can point at the exact spot.

Depth is bounded before anything is composed, from the parser's event stream: composing is
recursive, so a deep enough file can overflow the stack (a segfault at 30,000 levels was seen),
and libyaml since PyYAML 6.0.4 refuses 1,000 levels in its own words. The user gets our line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from gradexplain.errors import (
    Location,
    SpecLimitError,
    SpecSafetyError,
    SpecSchemaError,
    SpecSyntaxError,
    quoted,
)

MAX_DEPTH = 64
MAX_NODES = 200_000

KeyPath = tuple[str | int, ...]

# libyaml's loader, where PyYAML was built with it (its wheels are), composes about 7x faster
# than the pure-Python one: a spec near the 1 MB bound reads in a fraction of a second.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STANDARD = "tag:yaml.org,2002:"
_TAG_WORDS = {f"{_STANDARD}int": "a whole number", f"{_STANDARD}float": "a number",
              f"{_STANDARD}bool": "true or false", f"{_STANDARD}null": "null",
              f"{_STANDARD}timestamp": "a date"}
_NUMBER_TAGS = {f"{_STANDARD}int", f"{_STANDARD}float"}
# A whole number YAML 1.1 reads as octal: a 0 followed by more digits (`010`, `-007`).
_LEADING_ZERO = re.compile(r"[-+]?0[0-7_]+")
_SCALAR_TAGS = {f"{_STANDARD}{name}" for name in ("str", "int", "float", "bool", "null")}
# Dates stay the text they were written as: no spec value is a date, and the text reads better in
# an error than a datetime would.
_TEXT_TAGS = {f"{_STANDARD}timestamp"}


@dataclass(frozen=True)
class Place:
    """Where a value starts: 1-based line and column, and whether the scalar was quoted."""

    line: int
    column: int
    quoted: bool = False


@dataclass(frozen=True)
class Document:
    """A parsed spec file: the plain data and the place of every key and value in it."""

    file: str
    data: dict[str, object]
    value_places: Mapping[KeyPath, Place]
    key_places: Mapping[KeyPath, Place]

    def where(self, path: KeyPath) -> Location:
        """The location of the value at `path`, or of the nearest enclosing value that has one."""
        return self._locate(path, self.value_places)

    def where_key(self, path: KeyPath) -> Location:
        """The location of the key that ends `path` (for unknown or duplicate keys)."""
        return self._locate(path, self.key_places if path in self.key_places else self.value_places)

    def _locate(self, path: KeyPath, places: Mapping[KeyPath, Place]) -> Location:
        probe = path
        while probe and probe not in places:
            probe = probe[:-1]
        place = places.get(probe) or self.value_places.get(())
        if place is None:
            return Location(self.file, None, None, path)
        return Location(self.file, place.line, place.column, path)

    def text_offset(self, path: KeyPath) -> int:
        """How far a scalar's text starts after its place (1 for a quoted scalar's quote)."""
        place = self.value_places.get(path)
        return 1 if place is not None and place.quoted else 0


def parse_document(text: str, file: str) -> Document:
    """Parse YAML text into a Document (see the module docstring for what is refused)."""
    _refuse_deep_nesting(text, file)
    try:
        # The reader checks every character as the loader is made: it can fail here already.
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:
        raise _bad_character(exc, text, file) from None
    try:
        node = loader.get_single_node()
    except yaml.reader.ReaderError as exc:
        raise _bad_character(exc, text, file) from None
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, text, file) from None
    except yaml.YAMLError as exc:
        raise SpecSyntaxError(str(exc).splitlines()[0], Location(file)) from None
    except RecursionError:
        raise _too_deep(Location(file)) from None
    finally:
        loader.dispose()
    if node is None:
        raise SpecSyntaxError(
            "the file is empty; a spec is a YAML mapping with at least `forward:` "
            "(see specs/two_modules.yaml)",
            Location(file),
        )
    walker = _Walker(file)
    data = walker.walk(node, (), 0)
    if data is None:  # a document with nothing in it (`---` and `...`, or `null`)
        raise SpecSyntaxError(
            "the document is empty; a spec is a YAML mapping with at least `forward:` "
            "(see specs/two_modules.yaml)", Location(file))
    if not isinstance(data, dict):
        kind = ("a list" if isinstance(data, list)
                else f"the scalar {quoted(data) if isinstance(data, str) else repr(data)}")
        raise SpecSyntaxError(
            f"the top level must be a mapping (`key: value` lines), found {kind}",
            Location(file, node.start_mark.line + 1, node.start_mark.column + 1),
        )
    return Document(file, data, walker.value_places, walker.key_places)


def _too_deep(where: Location) -> SpecLimitError:
    return SpecLimitError(
        f"the YAML is nested too deeply: more than {MAX_DEPTH} levels of lists and mappings, "
        "which no spec needs (look for brackets that never close)",
        where,
    )


def _refuse_deep_nesting(text: str, file: str) -> None:
    """A SpecLimitError at the first value nested more than MAX_DEPTH deep, found from the
    parser's events (no recursion, nothing composed); YAML errors are left to the composer,
    which reports them with their place."""
    try:
        _deepest_value(_Loader, text, file)
    except yaml.YAMLError:
        if _Loader is yaml.SafeLoader:
            return
        # libyaml scans ahead of the events it hands out, so its own limit can stop it before
        # our bound shows in the events; the pure-Python parser has no limit and stops at the
        # same syntax error or at our bound, whichever comes first in the text.
        try:
            _deepest_value(yaml.SafeLoader, text, file)
        except yaml.YAMLError:
            return


def _deepest_value(loader_class: type[yaml.SafeLoader], text: str, file: str) -> None:
    """Follow the event stream, with the key path of each value, until a value sits inside
    more than MAX_DEPTH lists and mappings (SpecLimitError) or the stream ends."""
    loader = loader_class(text)
    # One entry per open collection: its path, and the next index (a list) or, for a mapping,
    # the key just read (None while a key is awaited).
    open_collections: list[tuple[KeyPath, list[int | str | None], bool]] = []
    try:
        while True:
            event = loader.get_event()  # type: ignore[no-untyped-call]
            if event is None or isinstance(event, yaml.StreamEndEvent):
                return
            if isinstance(event, yaml.CollectionEndEvent):
                open_collections.pop()
                continue
            if not isinstance(event, (yaml.NodeEvent, yaml.CollectionStartEvent)):
                continue
            path = _next_path(open_collections, event)
            if len(open_collections) > MAX_DEPTH:
                mark = event.start_mark
                raise _too_deep(Location(file, mark.line + 1, mark.column + 1, path)
                                if mark is not None else Location(file, None, None, path))
            if isinstance(event, yaml.CollectionStartEvent):
                is_mapping = isinstance(event, yaml.MappingStartEvent)
                open_collections.append((path, [None if is_mapping else 0], is_mapping))
    finally:
        loader.dispose()


def _next_path(open_collections: list[tuple[KeyPath, list[int | str | None], bool]],
               event: yaml.Event) -> KeyPath:
    """The key path of the value `event` starts, advancing its parent's index or key; a
    mapping's key is placed at the mapping's own path."""
    if not open_collections:
        return ()
    parent, position, is_mapping = open_collections[-1]
    if not is_mapping:
        index = position[0]
        assert isinstance(index, int)
        position[0] = index + 1
        return (*parent, index)
    if position[0] is None:  # this node is a key
        position[0] = str(getattr(event, "value", "?"))
        return parent
    key = position[0]
    position[0] = None
    return (*parent, key)


def _bad_character(exc: yaml.reader.ReaderError, text: str, file: str) -> SpecSyntaxError:
    """A control character YAML does not allow (a NUL, a UTF-16 file read as UTF-8...)."""
    before = text[: exc.position]
    line, column = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
    character = exc.character if isinstance(exc.character, str) else chr(exc.character)
    return SpecSyntaxError(
        f"the character U+{ord(character):04X} is not allowed in YAML (control characters "
        "other than tab and newline are not)",
        Location(file, line, column),
    )


def _syntax_error(exc: yaml.MarkedYAMLError, text: str, file: str) -> SpecSyntaxError:
    mark = exc.problem_mark or exc.context_mark
    if mark is None:
        where = Location(file)
    else:
        tab = _tab_error(text, mark.line, mark.column, file)
        if tab is not None:
            return tab
        where = Location(file, mark.line + 1, mark.column + 1)
    parts = [part for part in (exc.context, exc.problem) if part]
    return SpecSyntaxError("; ".join(parts) or "not valid YAML", where)


# The line breaks YAML counts lines by, so a 0-based mark line finds its line in the text.
_LINE_BREAKS = re.compile("\r\n|[\r\n\x85\u2028\u2029]")


def _tab_error(text: str, line: int, column: int, file: str) -> SpecSyntaxError | None:
    """The error for a tab where YAML allows none, when that is what the parser tripped on: a
    tab in the indentation of the error's line, or the character the error points at. YAML's
    own words ("found character that cannot start any token") do not say it is the tab."""
    lines = _LINE_BREAKS.split(text)
    if line >= len(lines):
        return None
    row = lines[line]
    indent = row[: len(row) - len(row.lstrip(" \t"))]
    if "\t" in indent[: column + 1]:
        return SpecSyntaxError(
            f"line {line + 1} uses a tab for indentation; YAML needs spaces",
            Location(file, line + 1, indent.index("\t") + 1),
        )
    if row[column : column + 1] == "\t":
        return SpecSyntaxError(
            f"line {line + 1} has a tab at column {column + 1} where YAML needs a space",
            Location(file, line + 1, column + 1),
        )
    return None


class _Walker:
    """Turns composed nodes into plain data, recording places and enforcing the bounds."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.value_places: dict[KeyPath, Place] = {}
        self.key_places: dict[KeyPath, Place] = {}
        self.nodes = 0
        self._constructor = yaml.SafeLoader("")

    def _here(self, node: yaml.Node, path: KeyPath) -> Location:
        return Location(self.file, node.start_mark.line + 1, node.start_mark.column + 1, path)

    def walk(self, node: yaml.Node, path: KeyPath, depth: int) -> object:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise SpecLimitError(
                f"the YAML holds more than {MAX_NODES:,} values (aliases count each time they "
                "are used); write large tensors with randn/zeros/ones instead of literals",
                self._here(node, path),
            )
        if depth > MAX_DEPTH:  # still reachable through an alias of a deep anchor
            raise _too_deep(self._here(node, path))
        self._check_tag(node, path)
        is_quoted = isinstance(node, yaml.ScalarNode) and node.style in ("'", '"')
        self.value_places[path] = Place(
            node.start_mark.line + 1, node.start_mark.column + 1, is_quoted
        )
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.walk(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        assert isinstance(node, yaml.ScalarNode)
        if node.tag in _TEXT_TAGS:
            return self._text(node.value, node, path)
        if node.tag in _NUMBER_TAGS and not node.style:  # plain: None, or "" (libyaml)
            self._refuse_old_number(node, path)
        try:
            value: object = self._constructor.construct_object(node)
        except (ValueError, KeyError, IndexError, OverflowError, yaml.YAMLError):
            # An explicit tag on text that does not fit it (`!!int "abc"`, `!!bool maybe`), or
            # an integer too long for Python to read (over 4,300 digits).
            shown = node.value if len(node.value) <= 40 else f"{node.value[:40]}..."
            raise SpecSchemaError(
                f"{shown!r} cannot be read as {_TAG_WORDS.get(node.tag, _short_tag(node.tag))}",
                self._here(node, path),
            ) from None
        return self._text(value, node, path) if isinstance(value, str) else value

    def _refuse_old_number(self, node: yaml.ScalarNode, path: KeyPath) -> None:
        """YAML 1.1 reads `010` as 8 (octal) and `1:20` as 80 (base 60): numbers nobody
        writing a tensor means, read silently. Refused, saying what they would be."""
        text = node.value
        if ":" in text:
            why = "YAML 1.1 reads a:b as a number in base 60"
        elif _LEADING_ZERO.fullmatch(text):
            why = "YAML 1.1 reads a whole number with a leading 0 as octal"
        else:
            return
        read = self._constructor.construct_object(node)
        if ":" not in text and read == int(text.replace("_", ""), 10):
            return  # `007` is 7 either way
        raise SpecSchemaError(
            f"{text!r} would be read as {read!r} ({why}): write the number plainly, or quote "
            "it if it is text", self._here(node, path))

    def _text(self, text: str, node: yaml.Node, path: KeyPath) -> str:
        """Text as read; an escape such as "\\ud800" can make half a character, which no output
        can print, so it is refused."""
        if any("\ud800" <= character <= "\udfff" for character in text):
            raise SpecSchemaError(
                "the text holds half of a UTF-16 surrogate pair (an escape like \\ud800), "
                "which is not a character", self._here(node, path),
            )
        return text

    def _mapping(self, node: yaml.MappingNode, path: KeyPath, depth: int) -> dict[str, object]:
        result: dict[str, object] = {}
        for key_node, value_node in node.value:
            self._check_tag(key_node, path)  # a key can carry a tag too: refuse it as such
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag not in _SCALAR_TAGS:
                raise SpecSchemaError(
                    "keys must be plain names, not lists or mappings", self._here(key_node, path)
                )
            key = self._text(str(key_node.value), key_node, path)
            child = (*path, key)
            key_place = Place(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in result:
                first = self.key_places[child]
                raise SpecSchemaError(
                    f"the key {key!r} appears twice (first on line {first.line}); "
                    "each key may be given once",
                    self._here(key_node, child),
                )
            self.key_places[child] = key_place
            result[key] = self.walk(value_node, child, depth + 1)
        return result

    def _check_tag(self, node: yaml.Node, path: KeyPath) -> None:
        tag = node.tag or ""
        if isinstance(node, yaml.ScalarNode):
            allowed = tag in _SCALAR_TAGS or tag in _TEXT_TAGS
        elif isinstance(node, yaml.SequenceNode):
            allowed = tag == f"{_STANDARD}seq"
        else:
            allowed = tag == f"{_STANDARD}map"
        if allowed:
            return
        if "python" in tag:
            raise SpecSafetyError(
                f"the YAML tag {_short_tag(tag)} would build Python objects; "
                "specs never run code, so only plain YAML values are accepted",
                self._here(node, path),
            )
        raise SpecSchemaError(
            f"the YAML tag {_short_tag(tag)} is not supported; use plain numbers, text, lists "
            "and mappings",
            self._here(node, path),
        )


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(_STANDARD) :] if tag.startswith(_STANDARD) else tag
