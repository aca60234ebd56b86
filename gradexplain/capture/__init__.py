"""Capture: the only part that runs torch. `pipeline` is the one orchestrator, for YAML specs and
Python models alike: build -> trace (both passes) -> label -> replay (the hook-free run) -> check
-> derive (the chain rule) -> lessons, handing back a `records.session.Session`.

Importing this package imports no torch; its modules do.
"""
