"""The context: what a person gives as the input (files, folders, globs) loaded
into the value the root model's code reads as ``context``.

Below the engine: imports only leaf modules, so every entry point (the CLI,
``%rlm context``, the API, a sandbox's inside) loads the same way.
"""
