"""The errors people meet in autograd, explained: what torch said, why, and the fix.

One small rule per error, matched on torch's own message (verified on torch 2.13, see
`reference/torch-hook-facts.md` G1, G2, B04). Each rule reads only what the run recorded (the
tensor differentiated, its shape, whether it required grad, which nodes had freed their saved
tensors), so a saved session explains its errors without torch. No torch here.
"""

from __future__ import annotations

from collections.abc import Callable

from gradexplain.errors import first_line_of
from gradexplain.records.lessons.torch_errors import Attempt, ErrorExplanation
from gradexplain.records.trace import RunError


def explain_error(error: RunError, attempt: Attempt) -> ErrorExplanation:
    """The first rule whose message matches, else torch's message with no more to add."""
    message = error.message.lower()
    for fragment, rule in _RULES:
        if fragment in message:
            return rule(error, attempt)
    return ErrorExplanation(f"torch raised {error.category}", first_line_of(error.message),
                       "read torch's message above; gradexplain has no rule for this error yet")


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(size) for size in shape) + (",)" if len(shape) == 1 else ")")


def _count(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _call(attempt: Attempt) -> str:
    return (f"{attempt.of}.backward()" if attempt.kind == "backward"
            else f"torch.autograd.grad({attempt.of}, ...)")


def _non_scalar(error: RunError, attempt: Attempt) -> ErrorExplanation:
    seed = "gradient" if attempt.kind == "backward" else "grad_outputs"
    return ErrorExplanation(
        f"{_call(attempt)} on a non-scalar without `{seed}`",
        f"{attempt.of} has shape {_shape(error.shape)}, {_count(error.shape)} elements. "
        f"Backward computes a vector-Jacobian product vᵀ·J, and torch only makes up v = 1 "
        f"for a one-element output: for {_count(error.shape)} outputs it cannot know how to "
        "weigh them.",
        f"give v yourself: {attempt.of}.backward(gradient=torch.ones_like({attempt.of})) "
        f"(spec: `{seed}:`), or reduce to a scalar first: {attempt.of}.sum().backward(). "
        "Both give the sum of every output's gradient, not one gradient per output.",
    )


def _seed_shape(error: RunError, attempt: Attempt) -> ErrorExplanation:
    seed = "gradient" if attempt.kind == "backward" else "grad_outputs"
    return ErrorExplanation(
        f"{_call(attempt)} with a `{seed}` of another shape than {attempt.of}",
        f"`{seed}` is v in the vector-Jacobian product vᵀ·J: one weight for each element of "
        f"{attempt.of}, so it has {attempt.of}'s shape, {_shape(error.shape)}.",
        f"give `{seed}` the shape {_shape(error.shape)}: torch.ones_like({attempt.of}) weighs "
        f"every element 1 (spec: `{seed}:` with {_count(error.shape)} values in that shape).",
    )


def _second_time(error: RunError, attempt: Attempt) -> ErrorExplanation:
    earlier = ", ".join(str(run) for run in attempt.earlier) or "an earlier call"
    freed = ("; ".join(error.freed) if error.freed
             else "the saved tensors of a node on the way")
    return ErrorExplanation(
        f"a second {_call(attempt)} through a graph already freed",
        f"run {earlier} went through this graph without retain_graph=True, so torch freed "
        f"what its nodes had saved for backward: {freed}. Nodes that save nothing (x + 3: "
        "AddBackward0 keeps only the number alpha) could run again; these cannot.",
        "pass retain_graph=True to every backward but the last one over the same graph "
        "(spec: `retain_graph: true`), or run the forward again before the next backward.",
    )


def _no_grad(error: RunError, attempt: Attempt) -> ErrorExplanation:
    return ErrorExplanation(
        f"{_call(attempt)} of a tensor that does not require grad",
        f"{attempt.of} does not require grad: nothing it was computed from has "
        "requires_grad=True, so autograd recorded no graph for it (its grad_fn is None) and "
        "there is nothing to go back through.",
        "make the leaf you want a gradient for require it: torch.randn(2, requires_grad=True) "
        "or x.requires_grad_() (spec: `requires_grad: true` on the input); parameters of "
        "layers require grad already.",
    )


def _view_inplace(error: RunError, attempt: Attempt) -> ErrorExplanation:
    return ErrorExplanation(
        "an in-place change to a module output that a full backward hook wraps",
        "register_full_backward_hook wraps the module's outputs in BackwardHookFunction, a "
        "custom autograd Function returning views; modifying such a view in place would "
        "bypass the hook's backward, so torch forbids it.",
        "clone the output before changing it (out = out.clone()), or drop the module hook and "
        "put a tensor hook on the output instead (out.register_hook(fn)): tensor hooks add no "
        "wrapper.",
    )


def _post_accumulate_returned(error: RunError, attempt: Attempt) -> ErrorExplanation:
    return ErrorExplanation(
        "a post-accumulate-grad hook that returned a value",
        "register_post_accumulate_grad_hook's hook is called with the leaf after its .grad is "
        "accumulated and must return None: it changes .grad in place if at all. torch hands a "
        "returned value to the next hook in place of the leaf, then refuses the call.",
        "return nothing from the hook (p.grad.mul_(5), or p.grad = p.grad * 5, then no "
        "return); to replace the gradient on its way, use a tensor hook (p.register_hook(fn)), "
        "whose returned value does replace it.",
    )


def _freed_storage(error: RunError, attempt: Attempt) -> ErrorExplanation:
    earlier = (f"run {', '.join(str(run) for run in attempt.earlier)}" if attempt.earlier
               else "an earlier backward call")
    return ErrorExplanation(
        f"{_call(attempt)} reading a tensor whose memory was freed",
        "a tensor this backward needs has no storage left: torch resized it to nothing, which "
        "is how FSDP2 frees the parameters it gathered for the forward. It frees them after a "
        f"backward ({earlier} went through them) and gathers them again only through the hooks "
        "it puts on what the wrapped model returns: a backward that starts from a tensor the "
        f"model computed but did not return ({attempt.of}, a step inside its forward) finds "
        "them freed.",
        f"return {attempt.of} from the model (in a spec, the top-level forward's `returns:`), "
        "so that FSDP2's hooks are on it, or run the forward again before this backward.",
    )


_RULES: tuple[tuple[str, Callable[[RunError, Attempt], ErrorExplanation]], ...] = (
    ("grad can be implicitly created only for scalar outputs", _non_scalar),
    ("mismatch in shape: grad_output", _seed_shape),
    ("backward through the graph a second time", _second_time),
    ("does not require grad and does not have a grad_fn", _no_grad),
    ("of backwardhookfunction is a view and is being modified inplace", _view_inplace),
    ("post accumulate grad hooks should return none", _post_accumulate_returned),
    ("out of bounds for storage of size 0", _freed_storage),
)




__all__ = ["explain_error"]
