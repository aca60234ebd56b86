"""The records: plain, frozen, torch-free data that every stage hands to the next.

`trace` (what the hooks saw, and the autograd graph), `graph` (that graph read as positions and
edges), `names` (every naming rule), `walk` and `check` (every argument labelled and checked, the
chain rule), `lessons/` (each lesson's results), `diff` (legacy against full hooks), `paths`
(which module a path is in), `numbers` (the one number formatter), `session` (a capture saved
and loaded as JSON through `codec`). Nothing here imports torch: a saved session renders
without it.
"""
