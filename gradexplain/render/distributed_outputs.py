"""What `diff --ranks N` prints in each format, chosen in one place (as render/outputs.py does
for one process): JSON as pieces of text made as they are printed, markdown as a string, text
as a rich renderable, for `cli` to print. Renderers return values; nothing prints here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradexplain.collector import collector_paused

if TYPE_CHECKING:
    from gradexplain.records.distributed_diff import DistributedDiff
    from gradexplain.render.outputs import Output, OutputFormat


@collector_paused()
def distributed_diff_output(result: DistributedDiff, output_format: OutputFormat,
                            pretty: bool = False) -> Output:
    """Each rank's single-process walk against its distributed one in `output_format`."""
    if output_format == "json":
        from gradexplain.render.distributed_diff_json import distributed_diff_document
        from gradexplain.render.json_stream import json_chunks

        return json_chunks(distributed_diff_document(result), pretty)
    if output_format == "markdown":
        from gradexplain.render.distributed_diff_markdown import distributed_diff_markdown

        return distributed_diff_markdown(result)
    from gradexplain.render.distributed_diff_text import distributed_diff_text

    return distributed_diff_text(result)


__all__ = ["distributed_diff_output"]
