"""Torch-free readings of the records: legacy against full hooks (`diff`) and the firing order
(`order`). Renderers show their results; they compute nothing of their own.
"""
