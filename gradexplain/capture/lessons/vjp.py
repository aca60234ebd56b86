"""The vector-Jacobian-product lesson, computed: what `backward(gradient=v)` and
`autograd.grad(..., grad_outputs=v)` return, next to the Jacobian they never build.

This module owns the torch side of records/lessons/vjp.py. For every backward call with a
`gradient` and every grad call with `grad_outputs` (calls expected to fail are left to the trace)
it runs the call on a fresh build and keeps torch's vᵀJ, then computes the Jacobian J
independently, with torch.func.jacrev on another fresh build where the differentiated tensor is
an input or a parameter, and checks the identities a reader is told: vᵀJ = Σᵢ vᵢ·J[i]; for an
output (batch, m) and an input (batch, n) whose samples do not interact (J's cross-sample blocks
are zero, else the lesson says so and shows no blocks), the per-sample Jacobians from
vmap(jacrev) taken in the full batch, a seed of ones as the sum of the m one-hot columns, and a
one-hot seed as one row of every sample's block. It never prints.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gradexplain.capture.build import Built, build, make_tensor, observe
from gradexplain.capture.checks import agreement, identity_tolerance
from gradexplain.capture.values import grad_outputs, tensor_value
from gradexplain.errors import SpecRunError
from gradexplain.language.model import BackwardSpec, GradCall, GradOutputs, ModelSpec
from gradexplain.records.lessons.vjp import (
    CallKind,
    Identity,
    JacobianMethod,
    PerSample,
    RowTerm,
    SeedKind,
    VjpLesson,
)
from gradexplain.records.trace import TensorValue

# J has numel(of) * numel(wrt) elements: computed (and kept) up to this many...
JACOBIAN_LIMIT = 4096
# ...and written out as the sum Σᵢ vᵢ·J[i], one term per output element, up to this many.
ROWS_LIMIT = 400
# The per-sample Jacobian (batch, m, n) is computed up to this many elements, and only for
# m up to COLUMNS_LIMIT: it is checked against one autograd.grad call per output column.
PER_SAMPLE_LIMIT = 10_000
COLUMNS_LIMIT = 16
# The blocks are only a sample's own Jacobian if the samples do not interact, which is checked on
# J: where J itself is over JACOBIAN_LIMIT, it is computed for that check up to this many elements.
SAMPLES_JACOBIAN_LIMIT = 1_000_000
# Both that J and the blocks run the whole batch once per vmapped row or sample: torch.func runs
# them in chunks of at most this many batch rows, so that memory grows with the batch, not its
# square.
CHUNK_ROWS = 4096

# What torch.func raises for a forward it cannot transform; a step that torch refuses inside it
# comes as the spec's own SpecRunError.
_TRANSFORM_FAILURES = (RuntimeError, NotImplementedError, SpecRunError)


def vjp_lessons(spec: ModelSpec, inputs_first: bool = False) -> tuple[VjpLesson, ...]:
    """One lesson per (seeded backward or grad call, tensor it differentiates with respect to),
    in spec order: backward calls first, then grad calls. With `inputs_first`, a backward's
    lessons cover only the spec's inputs it reaches (all its leaves if it reaches none): it
    reaches every parameter too, and walk's lesson is about the inputs."""
    lessons: list[VjpLesson] = []
    for number, backward in enumerate(spec.backwards):
        if backward.gradient is not None and backward.expect_error is None:
            lessons += _backward_lessons(spec, number, backward, inputs_first)
    for number, call in enumerate(spec.grads):
        if call.grad_outputs is not None and call.expect_error is None:
            lessons += _grad_lessons(spec, number, call)
    return tuple(lessons)


def check_identity(text: str, got: torch.Tensor, expected: torch.Tensor) -> Identity:
    """`got` and `expected` equal up to their dtypes' rounding (`agreement` within
    `identity_tolerance`), with the largest absolute difference; tensors of different shapes
    never verify."""
    verified, error = agreement(got, expected, identity_tolerance(got.dtype, expected.dtype))
    return Identity(text, verified, error)


# --- the calls, as torch runs them -------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """What a lesson says about the call itself, whichever kind it is."""

    kind: CallKind
    number: int
    of: str
    seed_kind: SeedKind
    column: int | None


def _backward_lessons(spec: ModelSpec, number: int, backward: BackwardSpec,
                      inputs_first: bool) -> list[VjpLesson]:
    assert backward.gradient is not None
    built = build(spec)
    forward = _forward(built, built.inputs)
    of = _named(spec, forward, backward.of)
    seed = make_tensor(backward.gradient)
    try:
        # The graph is kept for the identities' own autograd calls (one-hot columns).
        torch.autograd.backward(of, seed, retain_graph=True)
    except RuntimeError:
        return []  # an unexpected failure: the trace reports it, there is no vᵀJ to explain
    call = _Call("backward", number, backward.of, "gradient", None)
    # backward differentiates with respect to every leaf that requires grad and that `of`
    # depends on: exactly the leaves it left a .grad on, the builds being fresh.
    reached = {name: leaf for name, leaf in built.leaves().items()
               if leaf.requires_grad and leaf.grad is not None}
    inputs = {item.name for item in spec.inputs}
    shown = ({name: leaf for name, leaf in reached.items() if name in inputs} or reached
             if inputs_first else reached)
    return [_lesson(spec, call, of, name, leaf, seed, leaf.grad)
            for name, leaf in shown.items() if leaf.grad is not None]


def _grad_lessons(spec: ModelSpec, number: int, call: GradCall) -> list[VjpLesson]:
    assert call.grad_outputs is not None
    built = build(spec)
    forward = _forward(built, built.inputs)
    of = _named(spec, forward, call.of)
    wrts = [_named(spec, forward, name) for name in call.wrt]
    seed = grad_outputs(call.grad_outputs, of)
    try:
        results = torch.autograd.grad(of, wrts, seed, retain_graph=True, allow_unused=True)
    except RuntimeError:
        return []  # an unexpected failure: the trace reports it, there is no vᵀJ to explain
    about = _Call("grad", number, call.of, call.grad_outputs.kind, call.grad_outputs.column)
    # A wrt that `of` does not depend on has no Jacobian worth showing (torch gives None).
    return [_lesson(spec, about, of, name, wrt, seed, result)
            for name, wrt, result in zip(call.wrt, wrts, results, strict=True)
            if result is not None]


@dataclass(frozen=True)
class _Forward:
    """One forward run: what the model returned, by return name, and every named value (the
    first value of each name, parameters included)."""

    returned: dict[str, Any]
    values: dict[str, Any]


def _forward(built: Built, inputs: Sequence[torch.Tensor],
             parameters: dict[str, torch.Tensor] | None = None) -> _Forward:
    """Run `built` on `inputs`, with some parameters replaced (functional_call) if given."""
    values: dict[str, Any] = {}
    with observe(lambda name, value: values.setdefault(name, value)):
        if parameters is None:
            output = built.model(*inputs)
        else:
            output = torch.func.functional_call(built.model, parameters, tuple(inputs))
    for name, parameter in built.model.named_parameters():
        values.setdefault(name, (parameters or {}).get(name, parameter))
    returns = built.spec.root.returns
    outputs = (output,) if len(returns) == 1 else tuple(output)
    return _Forward(dict(zip(returns, outputs, strict=True)), values)


def _named(spec: ModelSpec, forward: _Forward, name: str) -> torch.Tensor:
    """The tensor a call means by `name`, as the trace reads it: what the model returned under
    that name (`z = model(x); z.backward()`), else the first tensor computed with that name."""
    found = forward.returned[name] if name in forward.returned else forward.values[name]
    assert isinstance(found, torch.Tensor), name
    return found


# --- one lesson -------------------------------------------------------------------------------


def _lesson(spec: ModelSpec, call: _Call, of: torch.Tensor, wrt_name: str, wrt: torch.Tensor,
            seed: torch.Tensor, result: torch.Tensor) -> VjpLesson:
    identities: list[Identity] = []
    jacobian: torch.Tensor | None = None
    method: JacobianMethod | None = None
    rows: tuple[RowTerm, ...] = ()
    if of.numel() * wrt.numel() <= JACOBIAN_LIMIT:
        found = jacobian_of(spec, call.of, wrt_name)
        if found is not None:
            jacobian, method = found
            identities.append(check_identity("vᵀJ = Σᵢ vᵢ·J[i]", result,
                                             combine_rows(seed, jacobian)))
            if jacobian.numel() <= ROWS_LIMIT:
                rows = _row_terms(seed, jacobian)
    if call.seed_kind == "ones":
        summed = torch.autograd.grad(of.sum(), wrt, retain_graph=True)[0]
        identities.append(check_identity(
            f"v = ones: vᵀJ = the gradient of {call.of}.sum()", result, summed))
    per_sample, skipped, more = _per_sample(spec, call, of, wrt_name, wrt, seed, result,
                                            jacobian)
    identities += more
    return VjpLesson(
        kind=call.kind, call=call.number, of=call.of, of_shape=tuple(of.shape),
        wrt=wrt_name, wrt_shape=tuple(wrt.shape), seed=_value(seed), seed_kind=call.seed_kind,
        column=call.column, result=_value(result), jacobian=_optional_value(jacobian),
        jacobian_method=method, rows=rows, per_sample=per_sample, identities=tuple(identities),
        per_sample_skipped=skipped)


def combine_rows(seed: torch.Tensor, jacobian: torch.Tensor) -> torch.Tensor:
    """Σᵢ vᵢ·J[i] over the output elements i: J has shape of.shape + wrt.shape, v of.shape."""
    combined: torch.Tensor = torch.tensordot(seed.to(jacobian.dtype), jacobian, dims=seed.dim())
    return combined


def jacobian_of(spec: ModelSpec, of_name: str, wrt_name: str,
                chunk_size: int | None = None) -> tuple[torch.Tensor, JacobianMethod] | None:
    """J = ∂of/∂wrt, shape of.shape + wrt.shape, on a fresh build: torch.func.jacrev of the
    forward as a function of the input or parameter (`chunk_size` rows of J at a time, all at
    once if None), else (an intermediate tensor, or an op jacrev cannot transform) batched
    autograd.grad rows. None if neither works."""
    built = build(spec)
    input_names = [item.name for item in spec.inputs]
    parameters = dict(built.model.named_parameters())
    function: Callable[[torch.Tensor], torch.Tensor] | None = None
    method: JacobianMethod = "autograd"
    if wrt_name in input_names:
        function, start = _of_input(built, of_name, input_names.index(wrt_name))
        method = "jacrev"
    elif wrt_name in parameters:
        function, start = _of_parameter(built, of_name, wrt_name)
        method = "functional_call"
    if function is not None:
        try:
            return torch.func.jacrev(function, chunk_size=chunk_size)(start).detach(), method
        except _TRANSFORM_FAILURES:
            pass  # e.g. an op without a vmap rule: fall back to the autograd graph
    forward = _forward(built, built.inputs)
    of = _named(spec, forward, of_name)
    wrt = _named(spec, forward, wrt_name)
    basis = torch.eye(of.numel(), dtype=of.dtype).reshape(of.numel(), *of.shape)
    try:
        batched = torch.autograd.grad(of, wrt, basis, is_grads_batched=True, allow_unused=True)
    except RuntimeError:
        return None
    rows = batched[0] if batched[0] is not None else torch.zeros(of.numel(), *wrt.shape)
    return rows.reshape(tuple(of.shape) + tuple(wrt.shape)).detach(), "autograd"


def _of_input(built: Built, of_name: str,
              position: int) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
    """The forward as a function of one input: `of` when that input is replaced by its argument."""

    def function(value: torch.Tensor) -> torch.Tensor:
        inputs = list(built.inputs)
        inputs[position] = value
        return _named(built.spec, _forward(built, inputs), of_name)

    return function, built.inputs[position].detach()


def _of_parameter(built: Built, of_name: str,
                  name: str) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
    """The forward as a function of one parameter, through torch.func.functional_call."""

    def function(value: torch.Tensor) -> torch.Tensor:
        return _named(built.spec, _forward(built, built.inputs, {name: value}), of_name)

    return function, dict(built.model.named_parameters())[name].detach()


def _row_terms(seed: torch.Tensor, jacobian: torch.Tensor) -> tuple[RowTerm, ...]:
    """vᵢ and J[i] for every output element i, in row-major order (the order of reshape(-1))."""
    shape = tuple(seed.shape)
    flat_seed = seed.reshape(-1)
    flat_rows = jacobian.reshape(seed.numel(), *jacobian.shape[seed.dim():])
    terms = []
    for position, index in enumerate(itertools.product(*(range(size) for size in shape))):
        terms.append(RowTerm(tuple(index), float(flat_seed[position]),
                             _value(flat_rows[position])))
    return tuple(terms)


# --- per-sample Jacobians for an output (batch, m) -----------------------------------------------


def _per_sample(spec: ModelSpec, call: _Call, of: torch.Tensor, wrt_name: str,
                wrt: torch.Tensor, seed: torch.Tensor, result: torch.Tensor,
                jacobian: torch.Tensor | None
                ) -> tuple[PerSample | None, str | None, list[Identity]]:
    """The per-sample blocks of an output (batch, m) with respect to an input (batch, n), and
    the identities they satisfy; or None and why not (no reason when the shapes are no batch).

    A block J_b = ∂of[b]/∂wrt[b] is only a sample's own Jacobian when the samples do not
    interact: that is checked on J first, never assumed (a mean or softmax over the batch, or a
    transpose, mixes them). The blocks are then taken in the full batch, not by running one
    sample as a batch of one: a step may treat a batch of one differently (squeeze drops its
    batch dimension, a reshape to a fixed shape refuses it), and the lesson is about this run.
    """
    if not _is_batch(spec, of, wrt, wrt_name):
        return None, None, []
    batch, outputs = of.shape
    if batch == 0:
        return None, f"per-sample Jacobians are not computed: {call.of} has no samples", []
    features = wrt.shape[1]
    if outputs > COLUMNS_LIMIT:
        return None, (f"per-sample Jacobians are not computed: {call.of} has {outputs} outputs "
                      f"per sample, more than {COLUMNS_LIMIT}"), []
    if batch * outputs * features > PER_SAMPLE_LIMIT:
        return None, (f"per-sample Jacobians are not computed: {batch} blocks of "
                      f"{outputs}×{features} are more than {PER_SAMPLE_LIMIT} numbers"), []
    whole = jacobian
    if whole is None and batch * batch * outputs * features <= SAMPLES_JACOBIAN_LIMIT:
        found = jacobian_of(spec, call.of, wrt_name, chunk_size=max(1, CHUNK_ROWS // batch))
        whole = None if found is None else found[0]
    if whole is None:
        return None, (f"per-sample Jacobians are not computed: J is too large here to check "
                      f"that the samples of {call.of} do not interact"), []
    # J has shape (batch, m, batch, n); block (b, c) is ∂of[b]/∂wrt[c].
    by_blocks = whole.permute(0, 2, 1, 3)
    apart = ~torch.eye(batch, dtype=torch.bool)
    separate = check_identity(
        f"cross-sample blocks of J are zero: ∂{call.of}[b]/∂{wrt_name}[c] = 0 for b ≠ c",
        by_blocks[apart], torch.zeros_like(by_blocks[apart]))
    if not separate.verified:
        return None, (f"no per-sample Jacobians: the samples interact, ∂{call.of}[b]/"
                      f"∂{wrt_name}[c] ≠ 0 for some b ≠ c (see J), so {call.of}[b] depends on "
                      f"more than {wrt_name}[b]"), []
    blocks = _sample_blocks(spec, call.of, wrt_name)
    if blocks is None:
        return None, ("per-sample Jacobians are not computed: torch.func.vmap of "
                      "torch.func.jacrev cannot transform this forward"), []
    columns = [torch.autograd.grad(of, wrt, grad_outputs(GradOutputs("one_hot", column=j), of),
                                   retain_graph=True)[0] for j in range(outputs)]
    stacked = torch.stack(columns, dim=1)
    identities = [check_identity(
        f"row j of each sample's {outputs}×{features} block (vmap of jacrev) = the VJP of "
        f"one-hot column j, for j = 0…{outputs - 1}", blocks, stacked), separate]
    identities.append(check_identity(
        "the diagonal blocks of J are the per-sample Jacobians",
        by_blocks.diagonal(dim1=0, dim2=1).permute(2, 0, 1), blocks))
    if call.seed_kind == "ones":
        identities.append(check_identity(
            f"v = ones: vᵀJ = Σ of the {outputs} one-hot columns' VJPs", result,
            torch.stack(columns).sum(0)))
    elif call.seed_kind == "one_hot" and call.column is not None:
        identities.append(check_identity(
            f"v = one-hot column {call.column}: vᵀJ = per-sample J[:, {call.column}, :]",
            result, blocks[:, call.column, :]))
    else:
        identities.append(check_identity(
            "vᵀJ = v[b]ᵀ·J_b for every sample b", result,
            torch.einsum("bm,bmn->bn", seed.to(blocks.dtype), blocks)))
    sample = PerSample(_value(blocks), tuple(_value(column) for column in columns))
    return sample, None, identities


def _is_batch(spec: ModelSpec, of: torch.Tensor, wrt: torch.Tensor, wrt_name: str) -> bool:
    """An output (batch, m) and an input of the spec (batch, n), with the same batch."""
    return (of.dim() == 2 and wrt.dim() == 2 and of.shape[0] == wrt.shape[0]
            and wrt_name in {item.name for item in spec.inputs})


def _sample_blocks(spec: ModelSpec, of_name: str, wrt_name: str) -> torch.Tensor | None:
    """(batch, m, n): for every sample b, torch.func.jacrev of `of[b]` as a function of
    `wrt[b]` alone, every other sample (and every other input) kept as it is, vmapped over b.

    The model always sees the full batch, with the shapes of the real run; None if torch.func
    cannot transform the forward."""
    built = build(spec)
    position = [item.name for item in spec.inputs].index(wrt_name)
    whole, start = _of_input(built, of_name, position)

    def own_row(sample: torch.Tensor, here: torch.Tensor) -> torch.Tensor:
        # `here` is one row of the identity: True at this sample's position in the batch.
        rows = here.unsqueeze(1)
        output = whole(torch.where(rows, sample.unsqueeze(0), start))
        return torch.where(rows, output, torch.zeros_like(output)).sum(0)

    batch = start.shape[0]
    here = torch.eye(batch, dtype=torch.bool)
    try:
        blocks: torch.Tensor = torch.func.vmap(torch.func.jacrev(own_row),
                                               chunk_size=max(1, CHUNK_ROWS // batch))(start, here)
    except _TRANSFORM_FAILURES:
        return None
    return blocks.detach()


def _value(tensor: torch.Tensor) -> TensorValue:
    value = tensor_value(tensor)
    assert value is not None
    return value


def _optional_value(tensor: torch.Tensor | None) -> TensorValue | None:
    return None if tensor is None else _value(tensor)


__all__ = ["check_identity", "combine_rows", "jacobian_of", "vjp_lessons"]
