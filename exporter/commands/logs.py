"""Log lines as Prometheus exporters write them: ``--log.level`` and ``--log.format``.

One event is one line on stderr, in logfmt (the default, what Loki's and Vector's
logfmt parsers read) or JSON, with the keys and level names of Prometheus 3 and
node_exporter 1.9 (promslog, Go's slog)::

    time=2026-11-30T23:04:42.406Z level=WARN source=exporter/probe/loader.py:88 msg="..."

``--log.level`` takes ``debug``, ``info``, ``warn`` and ``error`` (``warning`` is an
alias); the lines say ``DEBUG``, ``INFO``, ``WARN``, ``ERROR``, as slog writes them.
A traceback, when there is one, goes in the same line (``exc``), escaped.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, TextIO

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,  # Python's own name, accepted for compatibility
    "error": logging.ERROR,
}
LEVEL_CHOICES = ("debug", "info", "warn", "error")
FORMATS = ("logfmt", "json")
_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN"}


def log_level(text: str) -> str:
    """An argparse type: a level name, ``warning`` folded into ``warn``."""
    name = text.strip().lower()
    if name not in LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r} (choose from {', '.join(LEVEL_CHOICES)})"
        )
    return "warn" if name == "warning" else name


def level_name(levelno: int) -> str:
    """The level as a line says it (slog's names)."""
    if levelno >= logging.ERROR:
        return "ERROR"  # CRITICAL too: exporters know four levels
    return _NAMES.get(levelno, "DEBUG" if levelno < logging.INFO else "INFO")


@lru_cache(maxsize=512)
def source(pathname: str, lineno: int) -> str:
    """``exporter/probe/loader.py:88``: the file from the top of its package (the first
    directory up without an ``__init__.py``), so a library's lines name the library
    too (``urllib3/connectionpool.py:812``); a lone module is its file name."""
    path = Path(pathname)
    top = path.parent
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    try:
        rel = path.relative_to(top).as_posix()
    except ValueError:
        rel = path.name
    return f"{rel}:{lineno}"


def timestamp(created: float) -> str:
    """RFC 3339 in UTC with milliseconds, like Go exporters' ``time``."""
    whole = int(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + (
        f".{int((created - whole) * 1000):03d}Z"
    )


def _printable(text: str) -> str:
    """Text that encodes as UTF-8: lone surrogates (undecodable bytes of a file name)
    become ``\\udcXX`` escapes instead of breaking the line."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _control(c: str) -> bool:
    return c < " " or "\x7f" <= c <= "\x9f" or c in "\u2028\u2029"


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def logfmt_value(value: str, *, quote: bool = False) -> str:
    """One logfmt value: bare when it can be (no space, ``=``, quote or control
    character, not empty), else quoted with ``\\``, ``"`` and control characters
    escaped, as go-logfmt writes it. Never contains a newline."""
    value = _printable(value)
    if not quote and value and not any(c <= " " or c in '="' or _control(c) for c in value):
        return value
    out = []
    for c in value:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif _control(c):
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _fields(record: logging.LogRecord, fmt: logging.Formatter) -> dict[str, str]:
    fields = {
        "time": timestamp(record.created),
        "level": level_name(record.levelno),
        "source": source(record.pathname, record.lineno),
        "msg": record.getMessage(),
    }
    if record.exc_info:
        fields["exc"] = fmt.formatException(record.exc_info)
    elif record.exc_text:
        fields["exc"] = record.exc_text
    if record.stack_info:
        fields["stack"] = fmt.formatStack(record.stack_info)
    return fields


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        f = _fields(record, self)
        return " ".join(
            f"{k}={logfmt_value(v, quote=k in ('msg', 'exc', 'stack'))}" for k, v in f.items()
        )


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        f = {k: _printable(v) for k, v in _fields(record, self).items()}
        return json.dumps(f, ensure_ascii=False, separators=(",", ":"))


FORMATTERS: dict[str, type[logging.Formatter]] = {
    "logfmt": LogfmtFormatter,
    "json": JSONFormatter,
}


def add_log_arguments(g: argparse._ActionsContainer) -> None:
    g.add_argument(
        "--log.level",
        dest="log_level",
        type=log_level,
        default="info",
        metavar="|".join(LEVEL_CHOICES),
        help="only log events at this level or above; 'warning' is the same as 'warn' "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--log.format",
        dest="log_format",
        choices=FORMATS,
        default="logfmt",
        help="one line per event on stderr: logfmt (time= level= source= msg=, as "
        "Prometheus writes them) or JSON with the same keys (default: %(default)s)",
    )


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is at each event, not as it was at setup: a
    thread still logging after a test (or an embedding program) swapped the stream
    back does not write to a closed file."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def setup_logging(level: str, fmt: str = "logfmt", stream: TextIO | None = None) -> None:
    """Every logger (ours and the libraries') to one handler in ``fmt`` at ``level``;
    warnings and exceptions that escape a thread become log lines too."""
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.setFormatter(FORMATTERS[fmt]())
    logging.basicConfig(level=LEVELS[level], handlers=[handler], force=True)
    logging.captureWarnings(True)
    log = logging.getLogger("exporter")

    def thread_died(args: Any) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "?"
        log.error(
            "thread %s stopped: %s",
            name,
            args.exc_value,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    threading.excepthook = thread_died
