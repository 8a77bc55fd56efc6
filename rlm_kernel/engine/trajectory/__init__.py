"""The run as cells: making the notebook's cells (``writing``) and reading
them back (``cells``), sub-call records, replaying recorded sub-calls, a
streamed reply's drafts, the run's result, and the sink interface a run
reports to with the read-only view of a run it reports (``sink.RunView``).

May import: ``protocol``.
"""
