"""The engine: the Jupyter-free core of an RLM run.

It owns its interfaces: the sink a run reports to (``sink.py``), the model
client it calls (``model_client.py``) and the executor its code runs in
(``execution.py``). Nothing here imports the sinks, the kernel or the
entry points; see docs/architecture.md.
"""
