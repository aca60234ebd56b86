"""The command line's options and arguments, each declared once with its help text, for the
commands in `cli.py` to share, and `run_options`, the parsed run options as plain values.
Nothing here runs a model or prints.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gradexplain.distributed import MAX_RANKS
from gradexplain.sessions import RunOptions
from gradexplain.threads import DEFAULT_THREADS, MAX_THREADS

if TYPE_CHECKING:
    # The records of a run (their dataclasses: 8 ms to import) are no part of `--help`,
    # `validate` or a completion; `walk` imports them when it runs.
    from gradexplain.records.trace import Mode

TracebackOption = Annotated[
    bool, typer.Option("--traceback", help="On an error, show the Python traceback too.")
]
def a_path(value: object) -> Path:
    """A path option's value: an empty one is refused (it would be taken for `.`, the current
    folder, and said to be a folder)."""
    if isinstance(value, Path):
        return value
    if not isinstance(value, str) or not value:
        raise typer.BadParameter("an empty path: give a file name")
    return Path(value)


def a_spec(value: object) -> str | None:
    """The SPEC argument: an empty one is refused, as `a_path` refuses an empty path."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise typer.BadParameter("an empty path: give a spec file or FILE.py:NAME")
    return value


SpecFilesArgument = Annotated[
    list[Path], typer.Argument(help="One or more spec files (YAML).", show_default=False,
                               parser=a_path, metavar="SPEC")
]


Choice = TypeVar("Choice", bound=Enum)


def choice_of(choices: type[Choice]) -> Callable[[object], Choice]:
    """A parser for an option with a fixed set of values. typer (0.2x) checks such values
    through pydantic, whose message for a bad one begins "Value error, "; this one says only
    the bad value and the choices (click names the option before it)."""

    def parse(value: object) -> Choice:
        for choice in choices:
            if value is choice or value == choice.value:
                return choice
        names = ", ".join(str(choice.value) for choice in choices)
        raise typer.BadParameter(f"{value!r} is not one of {names}")

    return parse


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


class PassChoice(str, Enum):
    legacy = "legacy"
    full = "full"
    both = "both"

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The passes to show."""
        if self is PassChoice.legacy:
            return ("legacy",)
        return ("full",) if self is PassChoice.full else ("legacy", "full")


class HookChoice(str, Enum):
    forward_pre = "forward_pre"
    forward = "forward"
    backward = "backward"
    full_backward_pre = "full_backward_pre"
    full_backward = "full_backward"
    tensor = "tensor"
    post_accumulate_grad = "post_accumulate_grad"
    node_pre = "node_pre"
    node = "node"


SpecArgument = Annotated[
    str | None,
    typer.Argument(help="The spec file (YAML), or a Python model: FILE.py:NAME or "
                   "package.module:NAME, an nn.Module or a zero-argument function returning "
                   "one (this runs that Python code). Leave it out when using --load.",
                   show_default=False, metavar="SPEC", parser=a_spec),
]
InputOption = Annotated[
    list[str] | None,
    typer.Option("--input", help="Python models: the shape of one forward argument, such as "
                 "4x3 (4x3:float64, 2x5:int64 for token ids 0-9); repeat it for each argument. "
                 "Filled with seeded randn; floating inputs require grad, unless :nograd is "
                 "added (4x3:nograd) to see what hooks get for an input without grad.",
                 show_default=False),
]
InputsOption = Annotated[
    Path | None,
    typer.Option("--inputs", help="Python models: a torch.save'd tensor, or list of tensors, "
                 "to use as the forward's arguments instead of --input (floating ones require "
                 "grad).", show_default=False, parser=a_path),
]


class LossChoice(str, Enum):
    sum = "sum"
    mean = "mean"


LossOption = Annotated[
    LossChoice | None,
    typer.Option("--loss", help="Python models: the scalar backpropagated, the sum (the "
                 "default) or the mean of the model's output (or of the part --loss-of "
                 "selects).", show_default=False, parser=choice_of(LossChoice)),
]
LossOfOption = Annotated[
    str | None,
    typer.Option("--loss-of", metavar="PATH", help="Python models returning a tuple, nested "
                 "tuples, a dict, a namedtuple or a dataclass (nn.LSTM's (out, (h, c))): the "
                 "part of the output --loss is taken of. Tuple indices and dict keys or fields "
                 "joined by dots: 0 is output[0], logits is output['logits'], 1.0 is "
                 "output[1][0]; a part that holds several tensors sums their losses. Default: "
                 "the whole output, every floating tensor in it that requires grad reduced by "
                 "--loss and the results added. A path that leads nowhere is an error listing "
                 "the paths there are.", show_default=False),
]
MaxValuesOption = Annotated[
    int | None,
    typer.Option("--max-values", min=1, help="Tensors with more elements are recorded as min, "
                 "max, mean and norm when a hook sees them, and checked on those. Default "
                 "10000; 1000 for Python models, whose activations are large.",
                 show_default=False),
]
ThreadsOption = Annotated[
    int | None,
    typer.Option("--threads", min=1, max=MAX_THREADS, help=f"torch's intra-op threads for the "
                 f"run. Default {DEFAULT_THREADS}: tiny models gain nothing from more, and with "
                 "one the output is the same whatever OMP_NUM_THREADS says.",
                 show_default=False),
]


class WrapChoice(str, Enum):
    ddp = "ddp"
    fsdp = "fsdp"


RanksOption = Annotated[
    int | None,
    typer.Option("--ranks", min=1, max=MAX_RANKS, help="Run the model in N processes joined "
                 "by torch.distributed (gloo on 127.0.0.1), wrapped in DistributedDataParallel "
                 "or FSDP2 (--wrap), and say for every hook whose derivative it sees: this "
                 "rank's own, or the mean over ranks, relative to the all-reduce. A spec's "
                 "distributed: section gives each rank its inputs; a Python model's batch is "
                 "cut into N equal parts.", show_default=False),
]
WrapOption = Annotated[
    WrapChoice | None,
    typer.Option("--wrap", help="With --ranks: ddp (DistributedDataParallel, the default "
                 "unless the spec's distributed.wrap says otherwise) or fsdp (FSDP2's "
                 "fully_shard).", show_default=False, parser=choice_of(WrapChoice)),
]


LoadOption = Annotated[
    Path | None,
    typer.Option("--load", help="Render a session saved by `walk --save` instead of running "
                 "a spec (torch is not run again).", show_default=False, parser=a_path),
]
FormatOption = Annotated[
    Format, typer.Option("--format", "-f", help="text for people, json for programs, markdown "
                         "for a GitHub page.", parser=choice_of(Format))
]
ModuleOption = Annotated[
    str | None,
    typer.Option("--module", help="Only this module (a path such as module2 or module2.l; "
                 "submodules included).", show_default=False),
]
PassOption = Annotated[
    PassChoice, typer.Option("--pass", help="Show the legacy pass, the full pass, or both.",
                             parser=choice_of(PassChoice))
]
HookOption = Annotated[
    list[HookChoice] | None,
    typer.Option("--hook", help="Only this kind of hook (repeat for several).",
                 show_default=False, parser=choice_of(HookChoice)),
]
SaveOption = Annotated[
    Path | None,
    typer.Option("--save", help="Also save the whole session (both traces, every label "
                 "and check) as JSON, for `report --load` and `diff --load`.",
                 show_default=False, parser=a_path),
]
OrderOption = Annotated[
    bool,
    typer.Option("--order", help="Also show the firing order of each shown pass's first "
                 "call: every hook call numbered, with the rule that puts it there."),
]
AllBlocksOption = Annotated[
    bool,
    typer.Option("--all-blocks", help="Text output: print every repeated block in full "
                 "instead of folding identical ones after the first."),
]
PrettyOption = Annotated[
    bool,
    typer.Option("--pretty", help="JSON output: one key or item per line, indented, for "
                 "people (the same document; compact by default)."),
]
TimelineOption = Annotated[
    bool,
    typer.Option("--timeline", help="Text output: also print each pass's timeline, every "
                 "hook call in firing order with its arguments (autograd Node hooks "
                 "included), after the answer and the chain rule."),
]
OutputOption = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="The markdown file to write (with --all: the "
                 "folder). Without it the report goes to stdout.", show_default=False,
                 parser=a_path),
]
AllSpecsOption = Annotated[
    Path | None,
    typer.Option("--all", help="Every *.yaml or *.yml spec in this folder: one report each, plus "
                 "an index.md linking them, written to the -o folder.",
                 show_default=False, parser=a_path),
]


def run_options(shapes: list[str] | None, inputs_file: Path | None, loss: LossChoice | None,
                max_values: int | None, threads: int | None,
                loss_of: str | None = None, ranks: int | None = None,
                wrap: WrapChoice | None = None) -> RunOptions:
    """The run options as parsed, in plain values (None where not given)."""
    return RunOptions(tuple(shapes or ()), inputs_file, None if loss is None else loss.value,
                      max_values, threads, loss_of, ranks, None if wrap is None else wrap.value)
