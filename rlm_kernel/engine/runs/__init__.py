"""A run from its start to its result: how it starts (``start.RunStart``),
the loop of root calls and steps (``run.Run``), what it shares with its
children (``tree``), the options model, compaction of the history, the
first message's briefing, follow-ups and rebuilding a history from a notebook.

May import: every other subpackage of the engine. Nothing below imports it.
"""
