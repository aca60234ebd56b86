"""The schema files shipped in gradexplain/schemas/ are what tests/helpers/schemagen.py builds,
load without torch, and require every key of DESIGN section 5's contract.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys

import pytest
from jsonschema import Draft202012Validator

from gradexplain.schemas import FILES, SchemaName, load_schema
from tests.helpers import schemagen
from tests.helpers.cli import REPO
from tests.helpers.schemacheck import (
    CONTRACT_ENUMS,
    CONTRACT_KEYS,
    SCHEMA_DIR,
    SCHEMA_IDS,
)


def test_shipped_schemas_are_what_schemagen_makes(request: pytest.FixtureRequest) -> None:
    update = bool(request.config.getoption("--update-golden"))
    made = schemagen.schemas()
    for file, schema in made.items():
        path = SCHEMA_DIR / file
        text = schemagen.render(schema)
        if update:
            path.write_text(text, encoding="utf-8")
            continue
        shipped = path.read_text(encoding="utf-8") if path.exists() else ""
        if shipped != text:
            changes = "".join(list(difflib.unified_diff(
                shipped.splitlines(keepends=True), text.splitlines(keepends=True), str(path),
                "tests/helpers/schemagen.py"))[:40])
            pytest.fail(f"{path} is not what tests/helpers/schemagen.py makes: run python -m "
                        "pytest --update-golden, read git diff gradexplain/schemas and bring "
                        f"docs/json.md up to date\n{changes}", pytrace=False)
    assert sorted(path.name for path in SCHEMA_DIR.glob("*.json")) == sorted(made)


@pytest.mark.parametrize("name", list(FILES))
def test_load_schema_gives_each_shipped_file(name: SchemaName) -> None:
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert FILES[name] == schemagen.file_name(SCHEMA_IDS[name])
    assert schema == json.loads((SCHEMA_DIR / FILES[name]).read_text(encoding="utf-8"))
    assert schema["properties"]["schema"] == {"const": SCHEMA_IDS[name]}


def test_load_schema_refuses_an_unknown_name() -> None:
    with pytest.raises(ValueError, match="walk"):
        load_schema("report")  # type: ignore[arg-type]


def test_walk_schema_requires_every_contract_key() -> None:
    schema = load_schema("walk")
    for where, keys in CONTRACT_KEYS.items():
        part = schema if where == "" else schema["$defs"][where]
        assert sorted(part["required"]) == sorted(keys), where
        assert set(keys) <= set(part["properties"]), where
    argument = schema["$defs"]["argument"]
    assert argument["anyOf"] == [{"required": ["value"]}, {"required": ["summary"]}]
    for (where, key), values in CONTRACT_ENUMS.items():
        assert schema["$defs"][where]["properties"][key]["enum"] == values, (where, key)


def test_diff_argument_is_walks() -> None:
    walk, diff = load_schema("walk"), load_schema("diff")
    for name in ("argument", "values", "summary", "meaning", "check"):
        assert diff["$defs"][name] == walk["$defs"][name], name


def test_schemas_load_without_torch() -> None:
    code = ("import sys\n"
            "from gradexplain.schemas import load_schema\n"
            "for name in ('walk', 'diff', 'session'):\n"
            "    assert load_schema(name)['$schema']\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
