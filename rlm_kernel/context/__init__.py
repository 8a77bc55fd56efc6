"""The context: what a person gives as the input (files, folders, globs,
archives, URLs) loaded into the value the root model's code reads as
``context``: text documents with their pages (``document.py``), tables as
pandas DataFrames, images; converted by well-kept libraries (the
``documents`` extra), in worker processes, cached by content hash.

Below the engine: imports only leaf modules, so every entry point (the CLI,
``%rlm context``, the API, a sandbox's inside) loads the same way. Modules:
``files`` (the entry, ``load_context``), ``loader`` (the work), ``kinds``,
``convert`` with ``pdf`` / ``office`` / ``web`` / ``tables``, ``archives``,
``urls``, ``cache``, ``pool``, ``progress``, ``describe`` (what the root
model is told), ``document`` (the values).
"""
