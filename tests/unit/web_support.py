"""A real exporter front on 127.0.0.1 / ::1 for the HTTP tests: the agent over a fixture
node, the App, and :class:`exporter.server.Server` with the limits a test asks for."""

from __future__ import annotations

import contextlib
import resource
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

from exporter.agent import Agent, AgentConfig
from exporter.findings import load_thresholds
from exporter.probe import ProbeConfig
from exporter.server import App, Server
from exporter.web.config import WebConfigSource
from exporter.web.transport import Limits

from .conftest import FIXTURES


def raise_fd_limit() -> None:
    """Hundreds of sockets at both ends live in this one process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 65536 if hard == resource.RLIM_INFINITY else hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


@contextlib.contextmanager
def running(
    tmp_path: Path,
    addresses: str | list[str] = "127.0.0.1:0",
    *,
    web_config: Path | None = None,
    limits: Limits | None = None,
    check_every_s: float = 1.0,
) -> Iterator[Server]:
    node = tmp_path / "node"
    if not node.exists():
        shutil.copytree(FIXTURES / "v2-systemd", node)
    cfg = AgentConfig(
        sysfs=str(node / "sys"),
        procfs=str(node / "proc"),
        sample_interval=3600.0,
        probe=ProbeConfig(enabled=False),
    )
    agent = Agent(cfg, load_thresholds())
    source = WebConfigSource(web_config, check_every_s=check_every_s) if web_config else None
    server = Server(
        App(agent.exposition, agent.facts, cfg.sample_interval, agent.status),
        addresses,
        source,
        limits,
    )
    agent.exposition.sources.attach_http(server)
    agent.run_pass()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        agent.close()


def host_for(server: Server, index: int = 0) -> str:
    sock = server.sockets[index]
    host = sock.getsockname()[0]
    if host in ("::", "0.0.0.0"):
        host = "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def raw_get(
    host: str,
    port: int,
    path: str = "/metrics",
    *,
    headers: str = "",
    timeout: float = 30.0,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], bytes, float]:
    """One request on a new connection, read to the end: (status, headers, body, seconds
    from connect to the last byte)."""
    t0 = time.perf_counter()
    family = socket.AF_INET6 if host.startswith("[") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as raw:
        raw.settimeout(timeout)
        raw.connect((host.strip("[]"), port))
        s: socket.socket = tls.wrap_socket(raw, server_hostname=host.strip("[]")) if tls else raw
        s.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{headers}\r\n".encode()
        )
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return status, hdrs, body, time.perf_counter() - t0


def wait_closed(sock: socket.socket, timeout: float) -> bool:
    """True once the server has closed ``sock`` (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(1 << 16):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
