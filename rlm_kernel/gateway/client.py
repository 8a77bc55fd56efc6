"""Talking to a Jupyter gateway (Enterprise Gateway or Kernel Gateway):
its REST API (``/api/kernelspecs``, ``/api/kernels``) and a kernel's
websocket (``/api/kernels/ID/channels``, Jupyter's JSON messages, one
socket carrying every channel).

:class:`Gateway` makes the requests and says what went wrong in one
sentence (unreachable, token refused, no such kernelspec); the token goes
only into the ``Authorization`` header, never into a message.
:class:`GatewayKernel` is a started kernel as the executor drives it, the
same calls as jupyter_client's manager and blocking client
(``execute``, ``input``, channels with ``get_msg``, ``interrupt_kernel``,
``shutdown_kernel``), so ``remote/executor.py`` drives either.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from ..errors import RLMError

TOKEN_ENVS = ("RLM_GATEWAY_TOKEN", "JUPYTER_GATEWAY_AUTH_TOKEN")
CHANNELS = ("shell", "iopub", "stdin", "control")


class GatewayError(RLMError):
    """The gateway cannot be used: unreachable, a refused token, no such kernelspec."""


def token_from_env(environ: Any = None) -> str | None:
    environ = os.environ if environ is None else environ
    return next((environ[name] for name in TOKEN_ENVS if environ.get(name)), None)


def kernel_env(environ: Any = None) -> dict[str, str]:
    """What the start request asks for the kernel: every ``KERNEL_*`` variable
    set here (Enterprise Gateway's settings for a kernel: ``KERNEL_NAMESPACE``,
    ``KERNEL_IMAGE``, ``KERNEL_USERNAME``...), as Jupyter's own gateway client sends them."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k.startswith("KERNEL_")}
    if "KERNEL_USERNAME" not in env:
        import getpass

        try:
            env["KERNEL_USERNAME"] = getpass.getuser()
        except Exception:  # noqa: BLE001 - no user name here: the gateway picks one
            pass
    return env


class Gateway:
    """A gateway's REST API at ``url``."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        if not url or not url.startswith(("http://", "https://")):
            raise GatewayError(f"--gateway-url must be the gateway's http(s) URL, got {url!r}.")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        scheme = os.environ.get("JUPYTER_GATEWAY_AUTH_SCHEME", "token")
        self.headers = {"Authorization": f"{scheme} {token}".strip()} if token else {}
        self.ssl = self._ssl_context()

    def __repr__(self) -> str:  # never the token
        return f"Gateway({self.url!r})"

    @staticmethod
    def _ssl_context() -> ssl.SSLContext | None:
        context = ssl.create_default_context(cafile=os.environ.get("JUPYTER_GATEWAY_CA_CERTS") or None)
        if os.environ.get("JUPYTER_GATEWAY_VALIDATE_CERT", "true").lower() in ("false", "0", "no"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        cert = os.environ.get("JUPYTER_GATEWAY_CLIENT_CERT")
        if cert:
            context.load_cert_chain(cert, os.environ.get("JUPYTER_GATEWAY_CLIENT_KEY") or None)
        return context

    def request(self, method: str, path: str, body: Any = None, *, timeout: float | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {**self.headers, **({"Content-Type": "application/json"} if data is not None else {})}
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout,
                                        context=self.ssl if self.url.startswith("https") else None) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raise self._refused(error, method, path) from None
        except (urllib.error.URLError, OSError) as error:
            why = getattr(error, "reason", error)
            raise GatewayError(f"Cannot reach the Jupyter gateway at {self.url} ({why}): is it running, and is "
                               "--gateway-url (or $RLM_GATEWAY_URL) right?") from None
        return json.loads(text) if text else None

    def _refused(self, error: urllib.error.HTTPError, method: str, path: str) -> GatewayError:
        try:
            detail = str(json.loads(error.read() or b"{}").get("message") or "")
        except (ValueError, OSError, AttributeError):
            detail = ""
        if error.code == 401 or (error.code == 403 and not detail):
            said = "no token was given" if not self.token else "the token was refused"
            return GatewayError(f"The Jupyter gateway at {self.url} said {error.code} {error.reason}: {said}; set "
                                "$RLM_GATEWAY_TOKEN (or $JUPYTER_GATEWAY_AUTH_TOKEN) to the gateway's auth token.")
        if self.token:
            detail = detail.replace(self.token, "<token>")
        return GatewayError(f"The Jupyter gateway at {self.url} answered {method} {path} with {error.code} "
                            f"{error.reason}{': ' + detail[:300] if detail else ''}.")

    # -- kernels ------------------------------------------------------------
    def kernelspecs(self) -> list[str]:
        found = self.request("GET", "/api/kernelspecs")
        if not isinstance(found, dict) or "kernelspecs" not in found:
            raise GatewayError(f"{self.url} does not answer as a Jupyter gateway (no /api/kernelspecs).")
        return sorted(found["kernelspecs"])

    def check(self, kernel_name: str) -> None:
        names = self.kernelspecs()
        if kernel_name not in names:
            raise GatewayError(f"The Jupyter gateway at {self.url} has no kernelspec {kernel_name!r}; it has "
                               f"{', '.join(names) or 'none'} (choose one with --gateway-kernel).")

    def start(self, kernel_name: str, timeout: float) -> str:
        model = self.request("POST", "/api/kernels", {"name": kernel_name, "env": kernel_env()}, timeout=timeout)
        return str(model["id"])

    def interrupt(self, kernel_id: str) -> None:
        self.request("POST", f"/api/kernels/{kernel_id}/interrupt", {})

    def delete(self, kernel_id: str) -> None:
        try:
            self.request("DELETE", f"/api/kernels/{kernel_id}", timeout=10)
        except GatewayError:
            pass  # gone already, or the gateway with it

    def socket_url(self, kernel_id: str, session_id: str) -> str:
        parts = urllib.parse.urlsplit(self.url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return urllib.parse.urlunsplit((scheme, parts.netloc, f"{parts.path}/api/kernels/{kernel_id}/channels",
                                        f"session_id={session_id}", ""))


class Channel:
    """One channel's messages, as jupyter_client's blocking channels give them."""

    def __init__(self, kernel: GatewayKernel, name: str) -> None:
        self.kernel, self.name = kernel, name
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue()

    def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        return self.queue.get(timeout=timeout) if timeout else self.queue.get_nowait()

    def send(self, msg: dict[str, Any]) -> None:
        self.kernel.send(self.name, msg)


class GatewayKernel:
    """A kernel the gateway started, driven over one websocket: the manager's
    and the blocking client's calls the remote executor makes. A second
    client of the same kernel (:meth:`another`) opens a socket of its own."""

    def __init__(self, gateway: Gateway, kernel_id: str, *, owner: bool = True, connect_timeout: float = 30.0) -> None:
        import websocket
        from jupyter_client.session import Session

        self.gateway, self.kernel_id, self.owner = gateway, kernel_id, owner
        # the gateway signs what it passes on to the kernel; this key signs nothing (JSON goes over the socket)
        self.session = Session(key=uuid.uuid4().hex.encode(), session=uuid.uuid4().hex)
        self.has_kernel = True
        self.gone: str | None = None  # why the kernel is gone (closed socket, a restart, death)
        self._arrived = threading.Condition()
        self._send_lock = threading.Lock()
        self.channels = {name: Channel(self, name) for name in CHANNELS}
        self.shell_channel, self.iopub_channel = self.channels["shell"], self.channels["iopub"]
        self.stdin_channel, self.control_channel = self.channels["stdin"], self.channels["control"]
        try:
            self.socket = websocket.create_connection(
                gateway.socket_url(kernel_id, self.session.session), timeout=connect_timeout,
                header=[f"{k}: {v}" for k, v in gateway.headers.items()],
                sslopt={"context": gateway.ssl} if gateway.url.startswith("https") else None)
        except Exception as error:  # noqa: BLE001 - websocket-client's errors: said as ours
            raise GatewayError(f"Cannot open the kernel's channels at the Jupyter gateway {gateway.url} "
                               f"({type(error).__name__}: {str(error)[:200]}).") from None
        self.socket.settimeout(None)
        self._reader = threading.Thread(target=self._read, name="rlm-gateway-socket", daemon=True)
        self._reader.start()

    def another(self) -> GatewayKernel:
        return GatewayKernel(self.gateway, self.kernel_id, owner=False)

    # -- the socket ---------------------------------------------------------
    def _read(self) -> None:
        import websocket

        quick_ack = getattr(socket, "TCP_QUICKACK", None)
        while True:
            if quick_ack is not None:
                # the gateway's server writes each message without TCP_NODELAY (Nagle): its next
                # message waits for our ACK, which Linux delays up to 40 ms unless asked not to,
                # once per read (measured: a trivial cell 58 ms through Enterprise Gateway)
                try:
                    self.socket.sock.setsockopt(socket.IPPROTO_TCP, quick_ack, 1)
                except (OSError, AttributeError):
                    quick_ack = None
            try:
                opcode, data = self.socket.recv_data()
            except (websocket.WebSocketException, OSError) as error:
                self._lost(f"its channels closed ({type(error).__name__})")
                return
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                self._lost("its channels closed")
                return
            try:
                msg = decode(data) if opcode == websocket.ABNF.OPCODE_BINARY else json.loads(data)
            except (ValueError, KeyError):
                continue
            channel = self.channels.get(msg.get("channel") or "")
            if channel is None:
                continue
            msg.setdefault("msg_type", msg.get("header", {}).get("msg_type"))
            msg.setdefault("parent_header", {})
            if msg["msg_type"] == "status" and msg.get("content", {}).get("execution_state") in ("restarting", "dead"):
                self._lost(f"the gateway reported it {msg['content']['execution_state']}")
            with self._arrived:
                channel.queue.put(msg)
                self._arrived.notify_all()

    def _lost(self, why: str) -> None:
        with self._arrived:
            self.gone = self.gone or why
            self._arrived.notify_all()

    def send(self, channel: str, msg: dict[str, Any]) -> None:
        from jupyter_client.jsonutil import json_default

        wire = {"header": msg["header"], "parent_header": msg.get("parent_header") or {},
                "metadata": msg.get("metadata") or {}, "content": msg.get("content") or {}, "channel": channel,
                "buffers": []}
        with self._send_lock:
            self.socket.send(json.dumps(wire, default=json_default))

    def poll(self, timeout_ms: int) -> list[Channel]:
        """The channels with a message waiting, after at most ``timeout_ms``."""
        with self._arrived:
            ready = [c for c in self.channels.values() if not c.queue.empty()]
            if not ready and self.gone is None:
                self._arrived.wait(timeout_ms / 1000)
                ready = [c for c in self.channels.values() if not c.queue.empty()]
        return ready

    def alive(self) -> bool:
        return self.gone is None and self._reader.is_alive()

    # -- the blocking client's calls ----------------------------------------
    def _request(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        msg = self.session.msg(msg_type, content)
        self.send(channel, msg)
        return str(msg["header"]["msg_id"])

    def execute(self, code: str, silent: bool = False, store_history: bool = True, allow_stdin: bool = True,
                user_expressions: dict[str, str] | None = None, stop_on_error: bool = True) -> str:
        return self._request("shell", "execute_request", {
            "code": code, "silent": silent, "store_history": store_history, "allow_stdin": allow_stdin,
            "user_expressions": user_expressions or {}, "stop_on_error": stop_on_error})

    def input(self, text: str) -> None:
        self._request("stdin", "input_reply", {"value": text})

    def complete(self, code: str, cursor_pos: int | None = None) -> str:
        return self._request("shell", "complete_request", {"code": code, "cursor_pos": len(code) if cursor_pos is None
                                                             else cursor_pos})

    def inspect(self, code: str, cursor_pos: int | None = None, detail_level: int = 0) -> str:
        return self._request("shell", "inspect_request", {"code": code, "cursor_pos": len(code) if cursor_pos is None
                                                            else cursor_pos, "detail_level": detail_level})

    def comm_info(self, target_name: str | None = None) -> str:
        return self._request("shell", "comm_info_request", {} if target_name is None else {"target_name": target_name})

    def get_shell_msg(self, timeout: float | None = None) -> dict[str, Any]:
        return self.shell_channel.get_msg(timeout=timeout)

    def get_iopub_msg(self, timeout: float | None = None) -> dict[str, Any]:
        return self.iopub_channel.get_msg(timeout=timeout)

    def stop_channels(self) -> None:
        try:
            self.socket.close(timeout=1)
        except Exception:  # noqa: BLE001 - closing a socket already gone
            pass

    # -- the manager's calls ------------------------------------------------
    def interrupt_kernel(self) -> None:
        self.gateway.interrupt(self.kernel_id)

    def shutdown_kernel(self, now: bool = True) -> None:
        self.stop_channels()
        if self.owner and self.has_kernel:
            self.has_kernel = False
            self.gateway.delete(self.kernel_id)


def decode(data: bytes) -> dict[str, Any]:
    """A binary websocket frame: the JSON message and its buffers (Jupyter's
    format: the number of parts, their offsets, then the parts)."""
    count = int.from_bytes(data[:4], "big")
    offsets = [int.from_bytes(data[4 * (i + 1): 4 * (i + 2)], "big") for i in range(count)]
    offsets.append(len(data))
    msg = json.loads(data[offsets[0]: offsets[1]])
    msg["buffers"] = [memoryview(data[offsets[i]: offsets[i + 1]]) for i in range(1, count)]
    return msg


__all__ = ["Gateway", "GatewayError", "GatewayKernel", "decode", "kernel_env", "token_from_env"]
