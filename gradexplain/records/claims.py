"""How a claim reads: the text and LaTeX of a derivative claim, rendered from its data alone
(of, wrt, the uses it is restricted to, its layout), so that what a label says is what its
check computes. No torch here.
"""

from __future__ import annotations

from gradexplain.records.names import Naming
from gradexplain.records.walk import Layout, Use


def claim_text(of: str, wrt: str, layout: Layout, via: tuple[Use, ...],
               summed_dims: tuple[int, ...], naming: Naming,
               seeded: bool) -> tuple[str, str, str | None]:
    """A derivative claim (d`of`/d`wrt` via these uses, in this layout) as text, LaTeX and its
    restriction (`partial`), from the claim alone."""
    short = naming.short(wrt)
    text = f"∂{of}/∂{short}"
    latex = rf"\frac{{\partial {naming.latex(of)}}}{{\partial {naming.latex(short)}}}"
    if seeded:
        # With a seed v (backward's `gradient`, grad's `grad_outputs`) what flows is the
        # vector-Jacobian product vᵀ·J, not the derivative J itself.
        text, latex = f"vᵀ·{text}", rf"v^{{\top}} {latex}"
    partial = None
    if via:
        partial = ", ".join(_use_text(use, naming) for use in via)
        text += f" (only the part via {partial})"
        uses = r",\ ".join(naming.latex(use.by) + ("" if use.operand is None else
                                                    rf"\,[\text{{operand }} {use.operand}]")
                           for use in via)
        latex += rf"\Big|_{{\mathrm{{via}}\ {uses}}}"
    if layout == "transposed":
        text, latex = f"({text})ᵀ", rf"\left({latex}\right)^{{\top}}"
    elif layout == "reshaped":
        text, latex = f"{text}, reshaped", rf"\operatorname{{reshape}}\left({latex}\right)"
    elif layout == "summed" and not summed_dims:
        # An expand to the tensor's own shape (matmul expands a batched operand): no dim is
        # summed, the value is the expansion's gradient.
        text += f", of its expansion ({short} expanded to its own shape: nothing summed)"
        latex += r"\ \text{(of its expansion, nothing summed)}"
    elif layout == "summed":
        dims = ", ".join(str(dim) for dim in summed_dims)
        word = "dim" if len(summed_dims) == 1 else "dims"
        text += f", before summing over {word} {dims} ({short} expanded)"
        latex += rf"\ \text{{(before summing over {word} {dims})}}"
    return text, latex, partial


def _use_text(use: Use, naming: Naming) -> str:
    """`m`, or `m's operand 0` for one operand's share where the op reads the tensor twice."""
    by = naming.short(use.by)
    if use.operand is None:
        return by
    return f"{by}'s operand {use.operand}"


__all__ = ["claim_text"]
