"""Kernel entry point: ``python -m rlm_kernel -f CONNECTION_FILE``."""

from __future__ import annotations


def main() -> None:
    from ipykernel.kernelapp import IPKernelApp

    from ._deferred_grammar import defer_iri_grammar

    defer_iri_grammar()

    from .kernel.ipkernel import RLMKernel

    IPKernelApp.launch_instance(kernel_class=RLMKernel)


if __name__ == "__main__":
    main()
