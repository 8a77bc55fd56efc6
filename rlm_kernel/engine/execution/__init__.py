"""Where a cell's code runs: the engine loop (one asyncio loop per process
for every run and model call), the code threads, the executor interface
and its IPython-shell and plain implementations, the namespace entries a run
installs, capturing a cell's outputs, the network guard, a person's tools.

May import: ``protocol``, ``trajectory``.
"""
