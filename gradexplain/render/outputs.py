"""What `walk`, `walk --ranks N` and `diff` print in each format, chosen in one place: JSON as
pieces of text made as they are printed (`json_stream`), markdown as a string, text as a rich
renderable, for `cli` to print. Renderers return values; nothing prints here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from gradexplain.collector import collector_paused

if TYPE_CHECKING:
    from collections.abc import Iterator

    from rich.console import RenderableType

    from gradexplain.analysis.order import FiringOrder
    from gradexplain.records.diff import HookDiff
    from gradexplain.records.distributed import DistributedWalk
    from gradexplain.records.pinned import PinnedView
    from gradexplain.records.walk import Walk

    # JSON as pieces of text, UTF-8 as is (compact; indented by one space with `pretty`),
    # ending in a newline; markdown as one string; text as a renderable.
    Output = Iterator[str] | str | RenderableType

OutputFormat = Literal["text", "json", "markdown"]
# Outputs are made with the cycle collector paused (`collector_paused`): a 300-layer
# timeline's renderables are hundreds of thousands of objects, no cycles to speak of (it left
# ~10,000 objects to the collector), and the collector's sweeps over them and the session took
# a third of its time. `cli_output.show` prints them so too (JSON is made as it is printed).


@collector_paused()
def walk_output(walk: Walk, view: PinnedView | None, orders: Sequence[FiringOrder] | None,
                output_format: OutputFormat, collapse: bool = True,
                timeline: bool = False, pretty: bool = False) -> Output:
    """The walk in `output_format`, with the firing orders when asked for (`orders` not None;
    JSON then has its `firing_order` key even when no pass made a hook call). Text and
    markdown open with `view` (the answer, the pinned chain rule; None: the walk's own, without
    the answer); text shows the passes' timelines only with `timeline`, markdown always."""
    if output_format == "json":
        from gradexplain.records.codec import to_data
        from gradexplain.render.json_stream import json_chunks
        from gradexplain.render.json_walk import walk_document

        document = walk_document(walk)
        if orders is not None:
            document["firing_order"] = [to_data(item) for item in orders]
        return json_chunks(document, pretty)
    if output_format == "markdown":
        from gradexplain.render.markdown import blocks
        from gradexplain.render.markdown_walk import walk_markdown
        from gradexplain.render.order import order_markdown

        return blocks(walk_markdown(walk, view),
                      *(order_markdown(item, 2) for item in orders or ()))
    from rich.console import Group

    from gradexplain.render.order import order_text
    from gradexplain.render.text_walk import walk_text

    return Group(walk_text(walk, view, collapse=collapse, timeline=timeline),
                 *(order_text(item) for item in orders or ()))


@collector_paused()
def diff_output(result: HookDiff, walk: Walk, view: PinnedView,
                output_format: OutputFormat, pretty: bool = False) -> Output:
    """Legacy against full hooks in `output_format`, then the chain rule with each module
    hook's argument at its step (`view` of `walk`); JSON adds walk's chain rule, which each
    side's `step` points into."""
    if output_format == "json":
        from gradexplain.render.json_diff import diff_document
        from gradexplain.render.json_stream import json_chunks
        from gradexplain.render.json_walk import chain_rule_json

        document = diff_document(result)
        document["chain_rule"] = chain_rule_json(walk.derivations)
        return json_chunks(document, pretty)
    if output_format == "markdown":
        from gradexplain.render.markdown import blocks, heading
        from gradexplain.render.markdown_diff import diff_markdown
        from gradexplain.render.markdown_pinned import pinned_markdown

        return blocks(diff_markdown(result), heading(2, "Chain rule"),
                      pinned_markdown(view.derivations, walk.naming, 3))
    from rich.console import Group

    from gradexplain.render.text_diff import diff_text
    from gradexplain.render.text_pinned import pinned_text

    return Group(diff_text(result), *(pinned_text(item) for item in view.derivations))


@collector_paused()
def distributed_walk_output(walk: DistributedWalk, output_format: OutputFormat,
                            timeline: bool = False, pretty: bool = False) -> Output:
    """`walk --ranks N` in `output_format`: the answer first; each rank's timelines only with
    `timeline` (JSON always holds every event)."""
    if output_format == "json":
        from gradexplain.render.distributed_json import distributed_document
        from gradexplain.render.json_stream import json_chunks

        return json_chunks(distributed_document(walk), pretty)
    if output_format == "markdown":
        from gradexplain.render.distributed_markdown import distributed_markdown

        return distributed_markdown(walk, timeline=timeline)
    from gradexplain.render.distributed_text import distributed_text

    return distributed_text(walk, timeline=timeline)


__all__ = ["Output", "OutputFormat", "diff_output", "distributed_walk_output", "walk_output"]
