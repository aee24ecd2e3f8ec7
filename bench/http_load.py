"""The HTTP front under load: many scrapers at once, idle sockets, slow senders.

    python bench/http_load.py [--containers 1000] [--scrapers 200] [--clients 20]
                              [--idle 500] [--idle-wait 12] [--json]

Two real exporter processes serve the same synthetic node (bench/sampler_bench.py's
1,000-container tree on tmpfs, probe off), side by side in one run:

* ``exporter``: ``contention-exporter`` as shipped (exporter/web: asyncio + h11,
  bounded threads, timeouts, the kernel's accept queue);
* ``baseline``: the same agent and App behind the server it replaced (the standard
  library's threaded WSGI server: accept queue 5, a thread per connection, no
  timeouts), started by this script with ``--serve-baseline``.

For each: N scrapes released at once, each on its own connection, asking as Prometheus
does (OpenMetrics, gzip), client time from connect to the last byte, each bounded by
``--timeout``; ``--clients`` clients scraping back to back; then fresh scrapes one after
the other with no other client, and again with ``--idle`` idle sockets held open
(connected, silent: the server's threads and file descriptors are read from /proc while
they are held, and after ``--idle-wait`` seconds the sockets the server closed are
counted) and with 100 slowloris clients trickling header bytes. Every client runs in
this process's asyncio loop (one thread), on 127.0.0.1 only; the run is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampler_bench import build_tree, tmpfs_dir  # noqa: E402

PROMETHEUS_HEADERS = (
    "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n"
    "Accept-Encoding: gzip\r\n"
)


def serve_baseline(sysfs: str, procfs: str) -> int:
    """The server before exporter/web, around the same agent and App."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from exporter.agent import Agent, AgentConfig
    from exporter.findings import load_thresholds
    from exporter.probe import ProbeConfig
    from exporter.server import App

    class Threading(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        allow_reuse_address = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    cfg = AgentConfig(sysfs=sysfs, procfs=procfs, probe=ProbeConfig(enabled=False))
    agent = Agent(cfg, load_thresholds())
    app = App(agent.exposition, agent.facts, cfg.sample_interval, agent.status)
    httpd = make_server("127.0.0.1", 0, app, server_class=Threading, handler_class=Quiet)
    agent.run_pass()
    agent.start()
    print(f"serving http on 127.0.0.1:{httpd.server_port}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        httpd.serve_forever()
    finally:
        agent.close()
    return 0


class Server:
    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT
        )
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 120
        self.port = 0
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError(f"{name} exited before serving")
            m = re.search(r"serving https? on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if not self.port:
            raise RuntimeError(f"{name} did not start serving in time")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


async def scrape(port: int, timeout: float, headers: str = PROMETHEUS_HEADERS) -> float | None:
    """Seconds from connect to the last byte of a 200, or None (error or timeout)."""
    t0 = time.perf_counter()
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                f"{headers}\r\n".encode()
            )
            data = await reader.read()
        if not data.startswith(b"HTTP/1.") or data[9:12] != b"200":
            return None
        return time.perf_counter() - t0
    except (TimeoutError, OSError):
        return None
    finally:
        if writer is not None:
            writer.close()


def summary(times: list[float | None], total: int) -> dict[str, Any]:
    ok = sorted(t for t in times if t is not None)
    out: dict[str, Any] = {"answered": len(ok), "of": total}
    if ok:
        out.update(
            p50_ms=round(statistics.median(ok) * 1e3, 1),
            p99_ms=round(ok[min(len(ok) - 1, int(0.99 * len(ok)))] * 1e3, 1),
            max_ms=round(ok[-1] * 1e3, 1),
        )
    return out


async def simultaneous(port: int, n: int, timeout: float) -> dict[str, Any]:
    times = await asyncio.gather(*(scrape(port, timeout) for _ in range(n)))
    return summary(list(times), n)


async def sequential(port: int, n: int, timeout: float) -> dict[str, Any]:
    times = [await scrape(port, timeout) for _ in range(n)]
    return summary(times, n)


async def concurrent(port: int, clients: int, each: int, timeout: float) -> dict[str, Any]:
    """``clients`` clients, each scraping ``each`` times back to back."""

    async def client() -> list[float | None]:
        return [await scrape(port, timeout) for _ in range(each)]

    runs = await asyncio.gather(*(client() for _ in range(clients)))
    return summary([t for run in runs for t in run], clients * each)


def held_by(pid: int) -> dict[str, int]:
    """The server process's threads and open file descriptors, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    return {"threads": threads, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


async def closed_by_server(held: list[tuple[asyncio.StreamReader, Any]]) -> int:
    """How many held sockets the server has closed (EOF or reset)."""
    closed = 0
    for reader, _ in held:
        try:
            async with asyncio.timeout(0.01):
                data = await reader.read(1)
            closed += data == b""
        except TimeoutError:
            pass  # still open, silent
        except OSError:
            closed += 1
    return closed


async def with_idle(
    server: Server, idle: int, n: int, timeout: float, wait: float
) -> dict[str, Any]:
    """Fresh scrapes while ``idle`` connected, silent sockets are held open; what the
    server holds meanwhile, and how many of them it has closed ``wait`` s later."""
    port = server.port
    before = held_by(server.proc.pid)
    held = []
    for _ in range(idle):
        try:
            held.append(await asyncio.open_connection("127.0.0.1", port))
        except OSError:
            break
    try:
        await asyncio.sleep(0.5)
        during = held_by(server.proc.pid)
        out = await sequential(port, n, timeout)
        await asyncio.sleep(max(0.0, wait - 0.5))
        out["idle_closed_by_server"] = await closed_by_server(held)
        out["after_wait"] = held_by(server.proc.pid)
    finally:
        for _, w in held:
            w.close()
    out["idle_open"] = len(held)
    out["idle_wait_s"] = wait
    out["before"] = before
    out["during"] = during
    return out


async def with_slowloris(port: int, slow: int, n: int, timeout: float) -> dict[str, Any]:
    """Fresh scrapes while ``slow`` clients trickle header bytes, never finishing."""
    stop = asyncio.Event()

    async def trickle() -> None:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        try:
            w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            while not stop.is_set():
                w.write(b"X-a: b\r\n")
                await w.drain()
                await asyncio.sleep(0.5)
        except OSError:
            pass
        finally:
            w.close()

    tasks = [asyncio.create_task(trickle()) for _ in range(slow)]
    await asyncio.sleep(0.5)
    try:
        return await sequential(port, n, timeout)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


async def measure(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    port, t = server.port, args.timeout
    await sequential(port, 3, t)  # warm: the formats Prometheus asks for are rendered
    r: dict[str, Any] = {"fresh": await sequential(port, args.fresh, t)}
    r["simultaneous"] = await simultaneous(port, args.scrapers, t)
    await asyncio.sleep(1)
    r["concurrent"] = await concurrent(port, args.clients, args.fresh, t)
    await asyncio.sleep(1)
    r["with_idle"] = await with_idle(server, args.idle, args.fresh, t, args.idle_wait)
    await asyncio.sleep(1)
    r["with_slowloris"] = await with_slowloris(port, 100, args.fresh, t)
    return r


def fmt(d: dict[str, Any]) -> str:
    s = f"{d['answered']}/{d['of']} answered"
    if "p50_ms" in d:
        s += f", p50 {d['p50_ms']} ms, p99 {d['p99_ms']} ms, max {d['max_ms']} ms"
    return s


def fmt_idle(d: dict[str, Any]) -> str:
    b, h, a = d["before"], d["during"], d["after_wait"]
    return (
        f"server threads {b['threads']} -> {h['threads']}, fds {b['fds']} -> {h['fds']} "
        f"with {d['idle_open']} idle sockets; after {d['idle_wait_s']:g} s it had closed "
        f"{d['idle_closed_by_server']} (threads {a['threads']}, fds {a['fds']})"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=1000)
    ap.add_argument("--scrapers", type=int, default=200)
    ap.add_argument("--clients", type=int, default=20, help="concurrent clients")
    ap.add_argument("--idle", type=int, default=500)
    ap.add_argument(
        "--idle-wait",
        type=float,
        default=12.0,
        help="seconds idle sockets are held before counting those the server closed "
        "(above the exporter's 10 s header timeout)",
    )
    ap.add_argument("--fresh", type=int, default=20, help="sequential scrapes per case")
    ap.add_argument("--timeout", type=float, default=30.0, help="per scrape, seconds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--serve-baseline", nargs=2, metavar=("SYSFS", "PROCFS"), help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    if args.serve_baseline:
        return serve_baseline(*args.serve_baseline)
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    results: dict[str, Any] = {"containers": args.containers, "scrapers": args.scrapers}
    with tmpfs_dir() as root:
        tree = build_tree(root, containers=args.containers)
        sysfs, procfs = str(tree.sysfs), str(tree.procfs)
        py = sys.executable
        servers = {
            "exporter": [
                py, "-m", "exporter", f"--path.sysfs={sysfs}", f"--path.procfs={procfs}",
                "--no-probe", "--web.listen-address=127.0.0.1:0", "--log.level=info",
            ],
            "baseline": [py, __file__, "--serve-baseline", sysfs, procfs],
        }  # fmt: skip
        for name, cmd in servers.items():
            server = Server(name, cmd)
            try:
                results[name] = asyncio.run(measure(server, args))
                body = subprocess.run(
                    ["curl", "-s", "--compressed", "-H", "Accept-Encoding: gzip",
                     f"http://127.0.0.1:{server.port}/metrics", "-o", os.devnull,
                     "-w", "%{size_download}"],
                    capture_output=True, text=True, timeout=60,
                )  # fmt: skip
                results[name]["gzip_bytes"] = int(body.stdout or 0)
            finally:
                server.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"HTTP load, {args.containers} containers, /metrics as Prometheus asks "
        "(OpenMetrics, gzip), client time connect -> last byte"
    )
    for name in ("exporter", "baseline"):
        r = results[name]
        print(f"\n{name} ({r['gzip_bytes']} bytes per gzip scrape)")
        rows = [
            ("fresh scrapes, alone", r["fresh"]),
            (f"{args.scrapers} simultaneous scrapes", r["simultaneous"]),
            (f"{args.clients} clients x {args.fresh} scrapes", r["concurrent"]),
            (f"fresh scrapes, {args.idle} idle sockets", r["with_idle"]),
            ("fresh scrapes, 100 slowloris", r["with_slowloris"]),
        ]
        for label, d in rows:
            print(f"  {label:<34} {fmt(d)}")
        print(f"  {'':<34} {fmt_idle(r['with_idle'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
