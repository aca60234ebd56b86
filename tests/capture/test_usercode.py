"""Whose error is it (capture/usercode.py): an exception that leaves through the user's file is
the model's only when the user's code raised it, not when our own code, called from inside
the user's forward (a hook), failed there: that is our bug and must stay an internal error."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from gradexplain.capture.usercode import blamed_on_user
from gradexplain.errors import ModelRunError
from gradexplain.safe_text import safe_text

USER_FILE = '''
def forward(callback, value):
    return callback(value)


def forward_that_fails(value):
    raise ValueError("the model is unhappy")
'''


@pytest.fixture
def user_module(tmp_path: Path) -> ModuleType:
    path = tmp_path / "users_model.py"
    path.write_text(USER_FILE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("users_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_users_own_exception_is_the_models_error(user_module: ModuleType) -> None:
    with pytest.raises(ModelRunError, match=r"users_model\.py"), \
            blamed_on_user("users_model.py:make", "forward"):
        user_module.forward_that_fails(1)


def test_our_code_failing_inside_the_users_forward_stays_ours(user_module: ModuleType) -> None:
    # safe_text(None) fails inside gradexplain, called from the user's forward, as a hook would.
    with pytest.raises(TypeError), blamed_on_user("users_model.py:make", "forward"):
        user_module.forward(safe_text, None)


def test_the_users_callback_failing_inside_our_code_is_the_models(
        user_module: ModuleType) -> None:
    # The user's code raising from a call our code made (a hook we wrapped) is still theirs.
    with pytest.raises(ModelRunError), blamed_on_user("users_model.py:make", "forward"):
        user_module.forward(lambda value: user_module.forward_that_fails(value), 1)
