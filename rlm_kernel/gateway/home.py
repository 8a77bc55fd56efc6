"""A gateway's kernel as the home of a run's namespace (``--executor gateway``).

:class:`GatewaySpec` is what ``remote/executor.py`` asks of a home: the
gateway checked before any model call, a kernel started through its REST
API with our inside installed, its messages read off one websocket, a
death said in one sentence (which ends the run: its cells are kept, and
``--resume`` runs them again in a new kernel), and the context carried over
(``context.py``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import RLMError
from .client import Gateway, GatewayError, GatewayKernel, token_from_env

DEFAULT_KERNEL = "python3"


@dataclass
class GatewaySpec:
    url: str
    kernel_name: str = DEFAULT_KERNEL
    token: str | None = field(default=None, repr=False)
    start_timeout: float = 0.0  # seconds a kernel may take to start (0: $KERNEL_LAUNCH_TIMEOUT + 10, else 70)
    checked: bool = False  # the gateway answered already (a child's spec, a kernel's lazy check)
    lazy: bool = False  # check at the first start, not at once (the gateway-backed RLM kernel must start anyway)

    label = "gateway's"
    death_ends_run = True
    cpu_seconds = 0.0

    def __post_init__(self) -> None:
        self._gateway: Gateway | None = None if self.lazy else Gateway(self.url, self.token)

    @property
    def gateway(self) -> Gateway:
        if self._gateway is None:
            if not self.url:
                raise RLMError(NO_URL)
            self._gateway = Gateway(self.url, self.token)
        return self._gateway

    def check(self) -> None:
        if not self.checked and not self.lazy:
            self.gateway.check(self.kernel_name)
            self.checked = True

    def start_kernel(self) -> tuple[Any, Any]:
        if not self.checked:
            self.gateway.check(self.kernel_name)
            self.checked = True
        timeout = self.start_timeout or float(os.environ.get("KERNEL_LAUNCH_TIMEOUT") or 60) + 10
        kernel_id = self.gateway.start(self.kernel_name, timeout)
        try:
            kernel = GatewayKernel(self.gateway, kernel_id)
            _wait_ready(kernel, timeout)
            from .shipping import install_code

            _setup(kernel, install_code(), timeout)
        except BaseException:
            self.gateway.delete(kernel_id)
            raise
        return kernel, kernel

    def stop_kernel(self, manager: Any, client: Any) -> None:
        manager.shutdown_kernel(now=True)

    def discard(self) -> None:
        pass

    def alive(self, manager: Any) -> bool:
        return bool(manager.alive())

    def poll(self, client: Any, timeout_ms: int) -> list[Any]:
        return client.poll(timeout_ms)

    def second_client(self, manager: Any) -> Any:
        return manager.another()

    def limits(self, manager: Any) -> Any:
        return _NoLimits()

    def courier(self, executor: Any) -> Any:
        from .context import GatewayCourier

        return GatewayCourier(executor)

    def child(self) -> GatewaySpec:
        return GatewaySpec(self.url, self.kernel_name, self.token, self.start_timeout, checked=True, lazy=self.lazy)

    def died(self) -> str:
        return ("the gateway's kernel died or was lost during this cell (killed, out of memory, its pod or "
                "container ended, or the network to the gateway failed); its variables are gone, so the run ends "
                "here. Its cells are kept: resume the run (rlm-kernel run --resume NOTEBOOK) to run them again in a "
                "new kernel")

    def forced_options(self) -> dict[str, Any]:
        return {"executor": "gateway", "gateway_url": self.url, "gateway_kernel": self.kernel_name}


class _NoLimits:
    """The gateway's kernel has the limits its gateway gives it (a pod's, a container's)."""

    def before_cell(self) -> None:
        pass


NO_URL = ("--executor gateway needs the gateway's URL: --gateway-url URL or $RLM_GATEWAY_URL "
          "(a Jupyter Enterprise Gateway or Kernel Gateway).")


def gateway_spec(options: Any, *, lazy: bool = False) -> GatewaySpec:
    url = options.gateway_url
    if not url:
        raise RLMError(NO_URL)
    return GatewaySpec(url, options.gateway_kernel or DEFAULT_KERNEL, options.gateway_token or token_from_env(),
                       lazy=lazy)


def _wait_ready(kernel: GatewayKernel, timeout: float) -> None:
    """Until the kernel answers a kernel_info request over the socket."""
    deadline = time.monotonic() + timeout
    kernel._request("shell", "kernel_info_request", {})
    while time.monotonic() < deadline:
        if not kernel.alive():
            raise GatewayError(f"The gateway's kernel ended as it started ({kernel.gone}).")
        try:
            reply = kernel.get_shell_msg(timeout=0.5)
        except Exception:  # noqa: BLE001 - queue.Empty: not yet (a kernel may miss the first request: ask again)
            kernel._request("shell", "kernel_info_request", {})
            continue
        if reply.get("msg_type") == "kernel_info_reply":  # to this request or an earlier one
            return
    raise GatewayError(f"The gateway's kernel did not answer within {timeout:g} s of its start.")


def _setup(kernel: GatewayKernel, code: str, timeout: float) -> None:
    msg_id = kernel.execute(code, silent=True, store_history=False, allow_stdin=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and kernel.alive():
        try:
            reply = kernel.get_shell_msg(timeout=0.5)
        except Exception:  # noqa: BLE001 - queue.Empty: not yet
            continue
        if reply["parent_header"].get("msg_id") == msg_id:
            content = reply["content"]
            if content.get("status") != "ok":
                raise GatewayError(f"The gateway's kernel could not install rlm-kernel's inside: "
                                   f"{content.get('ename')}: {content.get('evalue')}")
            return
    raise GatewayError("The gateway's kernel did not finish its setup.")


__all__ = ["DEFAULT_KERNEL", "GatewaySpec", "gateway_spec"]
