"""The reply protocol: what the root model and sub-models are told (the
system prompt, the first message, image parts) and how a root reply is read
(``reply.parse_reply``: thinking, prose, code fences, FINAL / FINAL_VAR; JSON
steps for tiny local models).

Pure functions and values. May import: nothing of the engine (leaf modules only).
"""
