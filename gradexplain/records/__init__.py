"""The records: plain, frozen, torch-free data that every stage hands to the next.

`trace` (what the hooks saw, and the autograd graph), `graph` (that graph read as positions and
edges), `walk` (every argument labelled and checked, the chain rule), `lessons/` (each lesson's
results), `session` (a capture saved and loaded as JSON through `codec`), `numbers` (the one
number formatter, for the renderers and for the text a lesson's record holds). Nothing here imports
torch: a saved session renders without it.
"""
