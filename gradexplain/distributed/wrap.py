"""How each pass's build is wrapped in a rank: DistributedDataParallel with the spec's options,
or FSDP2's `fully_shard` over all ranks. What torch refuses here is said in one line.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gradexplain.capture.build import Built, Wrap
from gradexplain.errors import ModelRunError, first_line
from gradexplain.language.model import DDPOptions, WrapKind
from gradexplain.records.distributed import WRAPPERS


def wrapper(kind: WrapKind, options: DDPOptions, world_size: int) -> Wrap:
    """The function that wraps one pass's fresh build (a new wrapper per pass: DDP keeps one
    communication hook for its life, FSDP2 changes the model in place)."""

    def wrap(built: Built) -> Built:
        try:
            if kind == "ddp":
                return replace(built, wrapper=_ddp(built, options))
            return replace(built, wrapper=_fsdp(built, world_size))
        except (RuntimeError, ValueError, TypeError, AssertionError) as error:
            if _waited_in_vain(error):
                # Wrapping is a collective (DDP broadcasts the parameters): a rank that is
                # still in the model's forward, or gone, leaves the others waiting.
                raise ModelRunError(
                    f"{WRAPPERS[kind]} could not be set up: this rank waited for another that "
                    "did not come (one still busy in the model's forward or a hook of its own, "
                    f"or one that stopped); torch said: {first_line(error)}") from error
            raise ModelRunError(f"{WRAPPERS[kind]} refused this model: "
                                f"{first_line(error)}") from error

    return wrap


def _waited_in_vain(error: BaseException) -> bool:
    """Whether torch's error is a collective that timed out or lost its peer, not a refusal of
    the model (gloo's `DistBackendError`: "Application timeout caused pair closure")."""
    import torch.distributed as dist

    backend_error = getattr(dist, "DistBackendError", None)
    return backend_error is not None and isinstance(error, backend_error)


def _ddp(built: Built, options: DDPOptions) -> Any:
    from torch.nn.parallel import DistributedDataParallel

    keywords: dict[str, Any] = {
        "find_unused_parameters": options.find_unused_parameters,
        "static_graph": options.static_graph,
        "gradient_as_bucket_view": options.gradient_as_bucket_view,
    }
    if options.bucket_cap_mb is not None:
        keywords["bucket_cap_mb"] = options.bucket_cap_mb
    ddp = DistributedDataParallel(built.model, **keywords)
    if options.no_sync:
        # What `ddp.no_sync()` sets for its block: the forward then prepares no reduction and
        # backward all-reduces nothing. Set on this pass's own wrapper, for the whole pass.
        ddp.require_backward_grad_sync = False
    return ddp


def _fsdp(built: Built, world_size: int) -> Any:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # fully_shard turns the model itself into the sharded module (its class changes in place,
    # its parameters become DTensors): the model is what the pass calls.
    return fully_shard(built.model, mesh=init_device_mesh("cpu", (world_size,)))


__all__ = ["wrapper"]
