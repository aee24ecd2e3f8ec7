"""Basic auth against the bcrypt hashes of ``basic_auth_users``.

bcrypt is slow on purpose (~50 ms at cost 10, seconds at 18), so, as exporter-toolkit
does, each (user, hash, password) outcome is remembered: a scraper pays for bcrypt
once, not at every scrape. Checks that do need bcrypt run one at a time on their own
thread (``Authenticator.verify``), so a flood of wrong passwords costs one core at
most and never holds up the threads that answer scrapes. An unknown user is checked
against a decoy hash, so response times do not tell which users exist.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from functools import cache

CACHE_SIZE = 1024


def parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """``Authorization: Basic base64(user:password)`` -> (user, password)."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, UnicodeDecodeError):
        return None


def _checkpw(password: bytes, hashed: bytes) -> bool:
    # Imported at the first check: a node without basic auth never needs bcrypt (its
    # module and its Rust library, ≈ 0.4 MB of RSS).
    import bcrypt

    ok: bool = bcrypt.checkpw(password, hashed)
    return ok


@cache
def _decoy() -> bytes:
    import bcrypt

    return bcrypt.hashpw(b"no such user", bcrypt.gensalt(rounds=10))


class Authenticator:
    def __init__(self) -> None:
        self._seen: OrderedDict[bytes, bool] = OrderedDict()
        self._lock = threading.Lock()
        self._bcrypt = threading.Lock()

    @staticmethod
    def _key(users: Mapping[str, bytes], user: str, password: bytes) -> tuple[bytes, bytes]:
        hashed = users.get(user) or b""
        h = hashlib.sha256(user.encode("utf-8") + b"\0" + hashed + b"\0" + password)
        return h.digest(), hashed

    def cached(self, users: Mapping[str, bytes], header: str | None) -> bool | None:
        """The outcome without bcrypt: True/False, or None when bcrypt must decide."""
        creds = parse_basic(header)
        if creds is None:
            return False
        key, _ = self._key(users, *creds)
        with self._lock:
            hit = self._seen.get(key)
            if hit is not None:
                self._seen.move_to_end(key)
            return hit

    def verify(self, users: Mapping[str, bytes], header: str | None) -> bool:
        """The outcome, with bcrypt if it is not remembered (blocking: a thread)."""
        hit = self.cached(users, header)
        if hit is not None:
            return hit
        creds = parse_basic(header)
        if creds is None:
            return False
        user, password = creds
        key, hashed = self._key(users, user, password)
        with self._bcrypt:
            try:
                ok = _checkpw(password, hashed or _decoy()) and bool(hashed)
            except ValueError:  # e.g. a password over bcrypt's 72 bytes
                ok = False
        with self._lock:
            self._seen[key] = ok
            while len(self._seen) > CACHE_SIZE:
                self._seen.popitem(last=False)
        return ok
