"""``rlm-kernel batch``: many runs, one per task of a JSONL file.

- ``tasks.py``: reading the tasks; results.jsonl; which tasks are done.
- ``workers.py``: one task in a worker process (local or Ray).
- ``command.py``: the command: local worker processes, or ``ray_tasks.py``.
- ``progress.py``: the progress bar.
"""
