"""Walking a model under torch.distributed (`walk --ranks N`, issue 21): starting the ranks,
joining them in one process group and bringing back what each one found (`launch.py`).

Nothing is imported here, so `gradexplain --help` does not pay for torch.distributed.
"""

# The most ranks a walk starts: each is a process with its own torch on one machine, and a
# lesson needs two or three. Read by the command line, the spec's `distributed:` section and
# the launcher, so that all three say the same.
MAX_RANKS = 8
