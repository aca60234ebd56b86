"""Wrapping a pass's build for a rank (distributed/wrap.py): what torch raises there is said as
what it is. Wrapping is a collective (DDP broadcasts the parameters from rank 0), so a rank left
waiting for another that never came is told apart from torch refusing the model."""

from __future__ import annotations

from typing import cast

import pytest
import torch

from gradexplain.capture.build import Built
from gradexplain.distributed import wrap
from gradexplain.errors import ModelRunError
from gradexplain.language.model import DDPOptions


def _built() -> Built:
    """A stand-in: the wrapping below raises before it reads the build."""
    return cast(Built, object())


def test_a_rank_left_waiting_is_not_a_refused_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hang in one rank's forward ended, after the timeout, as "DistributedDataParallel
    refused this model: Application timeout caused pair closure"."""
    assert issubclass(torch.distributed.DistBackendError, RuntimeError)

    def times_out(built: Built, options: DDPOptions) -> None:
        raise torch.distributed.DistBackendError("Application timeout caused pair closure")

    monkeypatch.setattr(wrap, "_ddp", times_out)
    with pytest.raises(ModelRunError) as raised:
        wrap.wrapper("ddp", DDPOptions(), 2)(_built())
    said = str(raised.value)
    assert "waited for another that did not come" in said and "refused" not in said


def test_a_model_torch_refuses_is_still_said_to_be_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuses(built: Built, options: DDPOptions) -> None:
        raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have "
                           "any parameter that requires a gradient.")

    monkeypatch.setattr(wrap, "_ddp", refuses)
    with pytest.raises(ModelRunError, match="refused this model"):
        wrap.wrapper("ddp", DDPOptions(), 2)(_built())
