"""Sub-calls: the helpers generated code calls (``llm_query``,
``llm_query_batched``, ``rlm_query``, ``rlm_query_batched``) and background
jobs (``wait=False``). They reach their run only through the narrow
``helpers.SubcallHost`` protocol.

May import: ``protocol``, ``trajectory``, ``execution``, ``model``.
"""
