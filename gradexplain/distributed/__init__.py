"""Walking a model under torch.distributed (`walk --ranks N`, issue 21): starting the ranks,
joining them in one process group and bringing back what each one found (`launch.py`).

Nothing is imported here, so `gradexplain --help` does not pay for torch.distributed.
"""
