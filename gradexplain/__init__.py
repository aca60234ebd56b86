"""gradexplain: which derivative is this hook argument?

The package root stays import-light on purpose: `gradexplain --help` and `gradexplain validate` must
not import torch, so nothing here pulls in the builder or tracer.
"""

from __future__ import annotations

__version__ = "0.1.0"
