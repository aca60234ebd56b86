"""Unicode formulas (what capture/rules.py and capture/derive.py write) as LaTeX for KaTeX and
MathJax.

The formulas mix math (`g ⊙ σ(t)(1 − σ(t))`), tensor names (`weightᵀ`, `z:mul`, `y@2`,
`sum#3`) and prose (`g reshaped to t's shape`). Math symbols map to commands, names go through
records.names (the one naming rule), and runs of prose become `\\text{...}` so KaTeX does not
set them as italic products of variables. No torch here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gradexplain.records.names import Naming, latex_of

# Words that only ever appear as prose in a formula. A tensor that happens to be called one of
# these is shown upright as text instead of upright as a name, which reads the same.
# `a` is left out: it is too likely to be a tensor's name.
PROSE = frozenset({
    "added", "along", "an", "and", "are", "as", "at", "averaged", "back", "before",
    "broadcast", "by", "channel", "chunks", "convolution", "dim", "dims", "each", "expanded",
    "for", "from", "in", "indices", "input", "into", "is", "joined", "looked", "max", "number",
    "numbers", "of", "on", "only", "or", "over", "part", "per", "permuted", "placed",
    "reshaped", "routed", "rows", "shape", "squeezed", "summed", "that", "the", "times", "to",
    "transposed", "unsqueezed", "up", "via", "were", "window", "with", "zeros"
})

# Functions KaTeX knows as commands; any other word applied to `(` is set with \operatorname.
BUILTIN_FUNCTIONS = frozenset({
    "arccos", "arcsin", "arctan", "cos", "cosh", "exp", "log", "max", "min", "sin", "sinh",
    "tan", "tanh"
})

SYMBOLS = {
    "⊙": r"\odot", "·": r"\cdot", "⋅": r"\cdot", "⊗": r"\otimes", "⋆": r"\star", "×": r"\times",
    "∘": r"\circ", "−": "-", "∂": r"\partial", "σ": r"\sigma", "ε": r"\epsilon",
    "λ": r"\lambda", "μ": r"\mu", "≥": r"\geq", "≤": r"\leq", "≠": r"\neq", "→": r"\to",
    "…": r"\ldots", "?": r"\mathrel{?}", "|": r"\vert ", "{": r"\{", "}": r"\}", "#": r"\#",
    "$": r"\$", "%": r"\%", "&": r"\&", "~": r"\sim", "^": r"\wedge", "\\": r"\backslash",
    '"': "''",
}
PLAIN = set("+-/=<>()[],.;:!*@0123456789")

SUPERSCRIPTS = {
    "ᵀ": r"\top", "⁰": "0", "¹": "1", "²": "2", "³": "3", "⁴": "4", "⁵": "5", "⁶": "6",
    "⁷": "7", "⁸": "8", "⁹": "9", "ⁿ": "n", "ⁱ": "i", "⁻": "-", "⁺": "+", "ᵏ": "k", "ᵐ": "m",
}

_TOKEN = re.compile(
    r"(?P<jacobian>J_(?P<node>[A-Za-z_][\w:]*)(?=ᵀ))"
    r"|(?P<sum>[Σ∑](?:_(?P<under>[A-Za-z]+))?)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_@:#]*(?:\.[A-Za-z_][A-Za-z0-9_@:#]*)*)(?P<hat>\u0302)?"
    r"|(?P<number>\d+(?:\.\d+)?)"
    r"|(?P<possessive>'s\b|')"
    r"|(?P<sup>[" + "".join(SUPERSCRIPTS) + r"]+)"
    r"|(?P<pluseq>\+=)"
    r"|(?P<space>\s+)"
    r"|(?P<prime>′)"
    r"|(?P<root>√)"
    r"|(?P<other>.)",
    re.DOTALL,
)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    match: re.Match[str]


@dataclass
class _Group:
    """A parenthesised part of a formula; `closed` is False for an unmatched `(`."""

    children: list[_Token | _Group] = field(default_factory=list)
    closed: bool = False


@dataclass
class _Piece:
    kind: str  # "math", "text" or "space"
    text: str
    scripted: bool = False  # carries a superscript already, so another needs braces


def formula_latex(text: str) -> str:
    """A Unicode formula as LaTeX: `g ⊙ σ(t)(1 − σ(t))` -> `g \\odot \\sigma(t)(1 - \\sigma(t))`."""
    return _assemble(_render(_parse(_tokens(text))))


def tensor_latex(name: str, naming: Naming) -> str:
    """A tensor name as the derivation writes it (`module2.t`, `weightᵀ`, `t (reshaped)`)."""
    return formula_latex(naming.short(name))


def _tokens(text: str) -> list[_Token]:
    found = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or "other"
        if kind in ("node", "under", "hat"):  # sub-groups: report the group they belong to
            kind = next(name for name in ("jacobian", "sum", "word") if match.group(name))
        found.append(_Token(kind, match.group(0), match))
    return found


def _parse(tokens: list[_Token]) -> list[_Token | _Group]:
    """Nest parentheses, so a group can be recognised as prose or be a square root's operand."""
    stack: list[_Group] = [_Group(closed=True)]
    for token in tokens:
        if token.kind == "other" and token.text == "(":
            stack.append(_Group())
        elif token.kind == "other" and token.text == ")" and len(stack) > 1:
            group = stack.pop()
            group.closed = True
            stack[-1].children.append(group)
        else:
            stack[-1].children.append(token)
    while len(stack) > 1:  # an unmatched `(`: its contents stay, the bracket shows as typed
        group = stack.pop()
        stack[-1].children.append(group)
    return stack[0].children


def _render(nodes: list[_Token | _Group]) -> list[_Piece]:
    pieces: list[_Piece] = []
    index = 0
    while index < len(nodes):
        node = nodes[index]
        following = nodes[index + 1] if index + 1 < len(nodes) else None
        if isinstance(node, _Group):
            pieces += _group(node)
        elif node.kind == "root":
            if following is not None:
                index += 1
                inner: list[_Token | _Group] = (
                    following.children if isinstance(following, _Group) else [following])
                pieces.append(_Piece("math", rf"\sqrt{{{_assemble(_render(inner))}}}"))
            else:
                pieces.append(_Piece("math", r"\sqrt{}"))
        elif node.kind == "word":
            pieces.append(_word(node, _is_call(nodes, index)))
        else:
            pieces += _token(node, pieces)
        index += 1
    return pieces


def _group(group: _Group) -> list[_Piece]:
    if group.closed and _is_prose(group.children):
        return [_Piece("text", "(" + "".join(_plain(child) for child in group.children) + ")")]
    inside = _render(group.children)
    return [_Piece("math", "("), *inside, *([_Piece("math", ")")] if group.closed else [])]


def _is_prose(nodes: list[_Token | _Group]) -> bool:
    """A parenthesised aside such as `(the number)` or `(input 0)`."""
    words = 0
    for node in nodes:
        if isinstance(node, _Group):
            return False
        if node.kind == "word" and node.text in PROSE:
            words += 1
        elif node.kind not in ("space", "number", "possessive") and node.text != ",":
            return False
    return words > 0


def _plain(node: _Token | _Group) -> str:
    if isinstance(node, _Group):
        return "(" + "".join(_plain(child) for child in node.children) + ")"
    return node.text


def _is_call(nodes: list[_Token | _Group], index: int) -> bool:
    """`tanh²(h)`, `softmax(x)`, `gelu′(t)`: a word applied to a parenthesised argument."""
    for node in nodes[index + 1:]:
        if isinstance(node, _Group):
            return True
        if node.kind not in ("sup", "prime"):
            return False
    return False


def _word(token: _Token, call: bool) -> _Piece:
    word = token.match.group("word")
    hat = token.match.group("hat") is not None
    if word in PROSE and not call:
        return _Piece("text", word)
    if call and len(word) > 1 and not hat:
        if word in BUILTIN_FUNCTIONS:
            return _Piece("math", "\\" + word)
        return _Piece("math", rf"\operatorname{{{_escape_name(word)}}}")
    text, scripted = _name(word)
    if hat:
        return _Piece("math", rf"\hat{{{text}}}")
    return _Piece("math", text, scripted)


def _name(word: str) -> tuple[str, bool]:
    """A tensor name, with `.grad`-style attributes after it set upright."""
    parts = [word] if ":" in word else word.split(".")
    text = _escape_name(latex_of(parts[0]))
    for attribute in parts[1:]:
        text += rf".\mathrm{{{_escape_name(attribute)}}}"
    return text, "@" in parts[0] and len(parts) == 1


def _escape_name(text: str) -> str:
    """latex_of escapes `_` and `:` but leaves `#` (from `sum#3`), which KaTeX rejects."""
    return re.sub(r"(?<!\\)#", r"\\#", text)


def _token(token: _Token, pieces: list[_Piece]) -> list[_Piece]:
    kind = token.kind
    if kind == "space":
        return [_Piece("space", " ")]
    if kind == "number":
        return [_Piece("math", token.text)]
    if kind == "possessive":
        return [_Piece("text", token.text)]
    if kind == "sup":
        body = "".join(SUPERSCRIPTS[char] for char in token.text)
        _attach(pieces, f"^{{{body}}}")
        return []
    if kind == "prime":
        _attach(pieces, "'")
        return []
    if kind == "pluseq":
        return [_Piece("math", r"\mathrel{+}=")]
    if kind == "jacobian":
        node = token.match.group("node").removeprefix("torch::autograd::")
        return [_Piece("math", rf"J_{{\text{{{_escape_text(node)}}}}}")]
    if kind == "sum":
        under = token.match.group("under")
        below = rf"_{{\text{{{_escape_text(under)}}}}}" if under else ""
        return [_Piece("math", rf"\sum{below}", bool(under))]
    char = token.text
    if char in SYMBOLS:
        return [_Piece("math", SYMBOLS[char])]
    if char in PLAIN:
        return [_Piece("math", char)]
    # Anything else stays visible as text rather than breaking the formula.
    return [_Piece("text", char)]


def _attach(pieces: list[_Piece], script: str) -> None:
    """A superscript (or prime) on the piece before it: braces if it already has one, so KaTeX
    never meets a double superscript (`y@2` is `y^{(2)}`, so `y@2ᵀ` is `{y^{(2)}}^{\\top}`)."""
    last = pieces[-1] if pieces else None
    if last is None or last.kind != "math":
        pieces.append(_Piece("math", "{}" + script, True))
        return
    if last.scripted:
        last.text = "{" + last.text + "}"
    last.text += script
    last.scripted = True


def _assemble(pieces: list[_Piece]) -> str:
    """Join pieces: spaces next to prose go into its `\\text{}`, spaces between math stay."""
    merged: list[_Piece] = []
    for index, piece in enumerate(pieces):
        if piece.kind == "space":
            before = next((p.kind for p in reversed(pieces[:index]) if p.kind != "space"), None)
            after = next((p.kind for p in pieces[index + 1:] if p.kind != "space"), None)
            if before is None or after is None:
                continue  # leading or trailing space
            kind = "text" if "text" in (before, after) else "space"
            piece = _Piece(kind, " ")
        if merged and merged[-1].kind == piece.kind and piece.kind != "math":
            if piece.kind == "text" or merged[-1].text != " ":
                merged[-1] = _Piece(piece.kind, merged[-1].text + piece.text)
            continue
        merged.append(piece)
    out = ""
    for piece in merged:
        text = rf"\text{{{_escape_text(re.sub(' +', ' ', piece.text))}}}" \
            if piece.kind == "text" else piece.text
        if re.search(r"\\[A-Za-z]+$", out) and re.match(r"[A-Za-z]", text):
            out += " "  # `\odot` then `x` must not become `\odotx`
        out += text
    return out


def _escape_text(text: str) -> str:
    replacements = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "#": r"\#", "$": r"\$",
                    "%": r"\%", "&": r"\&", "_": r"\_", "^": r"\^{}", "~": r"\~{}"}
    return "".join(replacements.get(char, char) for char in text)


__all__ = ["PROSE", "formula_latex", "tensor_latex"]
