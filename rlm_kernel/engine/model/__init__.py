"""Model calls: the model-client interface the engine calls, its litellm
implementation (retries, costs, streaming, a Router), providers' errors
read as one sentence, prompt caching, and the ledger and budget every call
is charged to.

May import: ``protocol``, ``trajectory``, ``execution`` (the engine loop, to stop it before litellm's exit handler).
"""
