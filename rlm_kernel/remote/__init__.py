"""A run's namespace in another kernel, driven over the Jupyter kernel
protocol: the parts the sandbox (``sandbox/``: a confined kernel here) and a
gateway (``gateway/``: a kernel a Jupyter gateway starts) share.
``executor.py`` is the engine's executor for it (a :class:`KernelHome` says
where the kernel lives), ``entries.py`` the run's entries asked over the
wire, ``inside.py`` what runs in that kernel, ``calls.py`` sub-calls from
there (JSON only: images as data URLs, background jobs' handles).
"""
