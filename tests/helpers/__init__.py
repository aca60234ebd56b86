"""Shared code of the tests: plain-PyTorch oracles, checkers, spec generators, runners."""
