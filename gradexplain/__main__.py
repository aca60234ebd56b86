"""`python -m gradexplain` runs the command line."""

from __future__ import annotations

from gradexplain.cli import entry

entry()
