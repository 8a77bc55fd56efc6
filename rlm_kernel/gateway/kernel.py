"""The gateway-backed RLM kernel ("RLM (Python 3, on a Jupyter gateway)"):
the kernel the page talks to holds the engine (and the model keys); every
cell, the person's and the agent's, runs in one kernel that a Jupyter
gateway started, behind it. It is the sandboxed kernel's forwarding
(``sandbox/forwarding.py``: outputs, widgets, ``input()``, Interrupt) with the
gateway as the home of that kernel. The gateway comes from the environment
the kernel starts in: ``$RLM_GATEWAY_URL``, ``$RLM_GATEWAY_TOKEN`` (or
``$JUPYTER_GATEWAY_AUTH_TOKEN``), ``$RLM_GATEWAY_KERNEL`` (set them for the
Jupyter server, or in this kernelspec's ``env``).
"""

from __future__ import annotations

from typing import Any

from .._deferred_grammar import defer_iri_grammar
from ..sandbox.forwarding import SandboxedRLMKernel
from .client import token_from_env
from .home import DEFAULT_KERNEL, GatewaySpec


class GatewayRLMKernel(SandboxedRLMKernel):
    implementation = "rlm_kernel_gateway"
    banner = ("RLM (Python 3, on a Jupyter gateway): every cell runs in a kernel the gateway at $RLM_GATEWAY_URL "
              "starts; sub-calls and model keys stay in this kernel.")

    def confined_spec(self, options: Any) -> GatewaySpec:
        # checked at the first cell, not here: a kernel that cannot start says nothing to the page
        return GatewaySpec(options.gateway_url or "", options.gateway_kernel or DEFAULT_KERNEL,
                           options.gateway_token or token_from_env(), lazy=True)

    async def do_execute(self, code: str, silent: bool, store_history: bool = True,
                         user_expressions: dict[str, Any] | None = None, allow_stdin: bool = False,
                         **kwargs: Any) -> dict[str, Any]:
        args = _context_paths(code)
        if args is None:
            return await super().do_execute(code, silent, store_history, user_expressions, allow_stdin, **kwargs)
        count = self.shell.execution_count
        try:
            self._context_there(args.paths, args.encoding)
            content: dict[str, Any] = {"status": "ok"}
        except Exception as error:  # noqa: BLE001 - the gateway unreachable, a path not there: said in the cell
            message = f"{type(error).__name__}: {error}"
            self.session.send(self.iopub_socket, "stream", {"name": "stderr", "text": message + "\n"},
                              parent=self.get_parent("shell"), ident=self._topic("stream"))
            content = {"status": "error", "ename": type(error).__name__, "evalue": str(error), "traceback": []}
        if store_history and not silent:
            self.shell.execution_count = count + 1
        return {**content, "execution_count": count, "user_expressions": {}, "payload": []}

    def _context_there(self, paths: list[str], encoding: str) -> None:
        """``%rlm context PATH``: the paths are read where the gateway's kernel runs, into its ``context``."""
        from ..errors import ContextError

        confined = self.rlm_sandbox
        confined.start()
        said = confined.call("load", "context", paths, encoding)
        if "error" in said:
            raise ContextError(f"The gateway's kernel could not load the context: {said['error']}")
        confined.call("set", "context", None)
        magics = self.shell.rlm_magics
        magics.context_sources, magics.context_encoding, magics._loaded_value = said["sources"], encoding, None
        if said.get("skipped"):
            print(said["summary"])
        print(said["description"])


def _context_paths(code: str) -> Any:
    """``%rlm context PATH ...`` (one line, with paths): its arguments; None for any other cell."""
    import shlex

    stripped = code.strip()
    if "\n" in stripped or not stripped.startswith("%rlm context "):
        return None
    from ..kernel.magics import _context_parser

    try:
        args = _context_parser().parse_args(shlex.split(stripped)[2:])
    except Exception:  # noqa: BLE001 - a bad line: the magic itself says what is wrong
        return None
    return args if args.paths else None


def main() -> None:
    from ipykernel.kernelapp import IPKernelApp

    defer_iri_grammar()
    IPKernelApp.launch_instance(kernel_class=GatewayRLMKernel)


if __name__ == "__main__":
    main()
