"""``--executor gateway``: a run's namespace in a kernel that a Jupyter
gateway (Enterprise Gateway, Kernel Gateway) starts: on a remote machine,
in a Kubernetes pod, a container. No launcher of ours: the gateway starts
the kernel (``client.py`` speaks its REST API and websocket), and the remote
executor (``remote/``) drives it as it drives a sandbox's kernel; sub-calls
come back through the kernel protocol, so model keys never leave this side.
``home.py``: the gateway as the kernel's home; ``context.py``: the context
read there or sent; ``shipping.py``: our inside code and contexts over the
wire; ``kernel.py``: the gateway-backed RLM kernel (a person's cells too).
"""
