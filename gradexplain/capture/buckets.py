"""DDP's communication hook, recorded: which parameters each bucket holds, their gradients as
the bucket was handed over, and the bucket once its all-reduce completed.

Only a distributed walk under DistributedDataParallel has one (`Built.wrapper` is the DDP
module). The hook does what DDP's default does, all-reduce then divide by the world size, so
that the walk's `.grad` is what a user's run gets. The all-reduce's completion callback may run
on one of gloo's threads, in any order relative to other buckets: it only keeps a copy of the
sum, and the copies become records on the main thread once backward has returned (DDP waits
for every bucket before backward returns).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gradexplain.capture.values import tensor_value
from gradexplain.records.trace import BucketCall, TensorValue

# Where the tracer is when a bucket is handed over: (the run, the last event's seq or None).
Position = Callable[[], tuple[int, int | None]]


class BucketRecorder:
    """Registers the recording comm hook on a DDP module and turns its calls into records."""

    def __init__(self, wrapper: Any, names: dict[int, str], position: Position) -> None:
        self.wrapper = wrapper
        self.names = names  # id(parameter) -> its name in the model
        self.position = position
        self.handed: list[tuple[int, int, int | None, tuple[str, ...], torch.Tensor,
                                tuple[torch.Size, ...]]] = []
        self.reduced: dict[int, torch.Tensor] = {}

    def register(self) -> None:
        # A lambda: DDP inspects the hook's `bucket` parameter and refuses any annotation but
        # the class itself, which postponed annotations turn into a string.
        self.wrapper.register_comm_hook(None, lambda state, bucket: self.handed_over(bucket))

    def handed_over(self, bucket: Any) -> Any:
        """One bucket ready: record it, all-reduce it, divide the sum by the world size."""
        import torch.distributed as dist

        parameters = bucket.parameters()
        names = tuple(self.names.get(id(item), f"parameter#{number}")
                      for number, item in enumerate(parameters))
        number = len(self.handed)
        run, after = self.position()
        buffer = bucket.buffer()
        self.handed.append((bucket.index(), run, after, names, buffer.detach().clone(),
                            tuple(item.shape for item in parameters)))
        future = dist.all_reduce(buffer, async_op=True).get_future()
        world_size = dist.get_world_size()

        def divided(done: Any) -> torch.Tensor:
            summed: torch.Tensor = done.value()[0]
            self.reduced[number] = summed.detach().clone()
            return summed.div_(world_size)

        return future.then(divided)

    def calls(self) -> tuple[BucketCall, ...]:
        return tuple(
            BucketCall(index, run, after, names, _pieces(before, shapes),
                       _pieces(self.reduced.get(number), shapes))
            for number, (index, run, after, names, before, shapes) in enumerate(self.handed))


def _pieces(flat: torch.Tensor | None, shapes: tuple[torch.Size, ...]) -> tuple[
        TensorValue | None, ...]:
    """A bucket's flat buffer cut into its parameters' gradients, each in its parameter's shape
    (DDP lays them out one after another, in the bucket's parameter order)."""
    if flat is None:
        return tuple(None for _ in shapes)
    if flat.layout != torch.strided:
        # A sparse gradient (Embedding(sparse=True)) is a bucket of its own, not laid out
        # flat: its dense values are the parameter's gradient.
        return tuple(tensor_value(flat.to_dense().reshape(shape)) for shape in shapes)
    pieces = []
    start = 0
    for shape in shapes:
        size = shape.numel()
        pieces.append(tensor_value(flat[start:start + size].reshape(shape)))
        start += size
    return tuple(pieces)


def bucket_recorder(wrapper: Any, model: torch.nn.Module,
                    position: Position) -> BucketRecorder | None:
    """A recorder for the DDP module a pass's model is called through; None for anything else
    (a single-process walk, FSDP2, which has no communication hook)."""
    if wrapper is None or not hasattr(wrapper, "register_comm_hook"):
        return None
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    return BucketRecorder(wrapper, names, position)


__all__ = ["BucketRecorder", "bucket_recorder"]
