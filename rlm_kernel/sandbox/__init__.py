"""Sandboxed runs: generated code in a confined execution kernel.

An ordinary ipykernel runs under bubblewrap (``launcher.py``: no network,
read-only files but one folder and a private temp folder, a scrubbed
environment, memory and CPU limits, dies with its parent), driven over
jupyter_client's ipc transport. ``launcher.SandboxSpec`` is that kernel's
home for the remote executor (``remote/executor.py``, shared with the
gateway); ``inside.py`` adds the sandbox's limits to the shared inside;
``context_files.py`` carries a context in. See docs/architecture.md and
trust page of the docs (docs/guide/trust.md).
"""
