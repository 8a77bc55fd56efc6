"""Sandboxed runs: generated code in a confined execution kernel.

An ordinary ipykernel runs under bubblewrap (``launcher.py``: no network,
read-only files but one folder and a private temp folder, a scrubbed
environment, memory and CPU limits, dies with its parent), driven over
jupyter_client's ipc transport. ``executor.py`` is the engine's executor
for it; ``inside.py`` is what runs in the confined kernel (the limits, the
helpers, ``FINAL`` and the ``answer`` dict, sub-calls sent out through the
stdin channel). See docs/architecture.md and README's Trust section.
"""
