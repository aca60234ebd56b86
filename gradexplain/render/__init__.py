"""Renderers: plain data in, a value out (text, markdown, JSON-able dicts). They never print and
never import torch; `cli.py` is the only place that writes."""
