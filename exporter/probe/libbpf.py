"""A small ctypes binding to the system's libbpf (Debian's ``libbpf1``): just what the
CO-RE scheduler probe needs.

Why ctypes and not a binding package: no maintained Python binding of libbpf exists
on PyPI, and libbpf's C ABI is stable (symbol versions ``LIBBPF_0.x``/``LIBBPF_1.x``),
so a few typed function pointers are the whole dependency. libbpf is used the way a
compiled loader would use it: open the object from memory, set read-only knobs and
map sizes, load (libbpf relocates the object against the kernel's BTF), attach, read
maps by file descriptor.

Errors: libbpf 1.x returns NULL or a negative errno and sets ``errno``; every call
here turns that into :class:`LibbpfError`. Messages libbpf prints while opening and
loading (CO-RE relocation failures, the verifier log) are captured by
:func:`capture_messages`, so they reach the probe status instead of stderr.
"""

from __future__ import annotations

import contextlib
import ctypes as ct
import ctypes.util
import errno
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

DEFAULT_LIBRARY = "libbpf.so.1"

# Functions the probe needs. A libbpf that lacks one of them is too old.
_REQUIRED = (
    "libbpf_set_print",
    "libbpf_version_string",
    "libbpf_num_possible_cpus",
    "bpf_object__open_mem",
    "bpf_object__load",
    "bpf_object__close",
    "bpf_object__btf",
    "bpf_object__next_map",
    "bpf_object__find_map_by_name",
    "bpf_object__find_program_by_name",
    "bpf_map__name",
    "bpf_map__fd",
    "bpf_map__set_max_entries",
    "bpf_map__initial_value",
    "bpf_program__attach",
    "bpf_program__fd",
    "bpf_program__set_autoload",
    "bpf_link__destroy",
    "bpf_map_lookup_elem",
    "bpf_map_update_elem",
    "bpf_map_delete_elem",
    "bpf_map_get_next_key",
    "bpf_map_lookup_batch",
    "btf__parse",
    "btf__free",
    "btf__find_by_name_kind",
    "btf__type_by_id",
    "btf__name_by_offset",
)

BTF_KIND_PTR = 2
BTF_KIND_STRUCT = 4
BTF_KIND_TYPEDEF = 8
BTF_KIND_FUNC_PROTO = 13
BTF_KIND_DATASEC = 15

_PRINT_FN = ct.CFUNCTYPE(ct.c_int, ct.c_int, ct.c_char_p, ct.c_void_p)


class LibbpfError(OSError):
    """A libbpf call failed; ``errno`` is the positive error number."""

    def __init__(self, what: str, err: int) -> None:
        err = abs(err)
        super().__init__(err, f"{what}: {os.strerror(err)}")


class LibbpfMissing(Exception):
    """The library cannot be loaded at all."""


class LibbpfTooOld(Exception):
    """The library loads but lacks a function the probe needs."""


class _OpenOpts(ct.Structure):
    # struct bpf_object_open_opts as of libbpf 1.0 (sz tells libbpf how much we pass).
    _fields_ = [
        ("sz", ct.c_size_t),
        ("object_name", ct.c_char_p),
        ("relaxed_maps", ct.c_bool),
        ("pin_root_path", ct.c_char_p),
        ("_attach_prog_fd", ct.c_uint32),
        ("kconfig", ct.c_char_p),
        ("btf_custom_path", ct.c_char_p),
        ("kernel_log_buf", ct.c_void_p),
        ("kernel_log_size", ct.c_size_t),
        ("kernel_log_level", ct.c_uint32),
    ]


class _BatchOpts(ct.Structure):
    _fields_ = [("sz", ct.c_size_t), ("elem_flags", ct.c_uint64), ("flags", ct.c_uint64)]


class _BtfType(ct.Structure):
    # struct btf_type: name_off, info (vlen: bits 0-15, kind: bits 24-28), size/type.
    _fields_ = [("name_off", ct.c_uint32), ("info", ct.c_uint32), ("size_type", ct.c_uint32)]


class _BtfMember(ct.Structure):
    # struct btf_member (follows a struct's btf_type): offset in bits.
    _fields_ = [("name_off", ct.c_uint32), ("type", ct.c_uint32), ("offset", ct.c_uint32)]


_lock = threading.Lock()
_messages: list[str] | None = None  # where libbpf's output goes while capturing
_libc = ct.CDLL(None, use_errno=True)
_libc.vsnprintf.argtypes = [ct.c_char_p, ct.c_size_t, ct.c_char_p, ct.c_void_p]
_libc.vsnprintf.restype = ct.c_int


def _on_print(level: int, fmt: bytes | None, args: int | None) -> int:
    if fmt is None or _messages is None:
        return 0
    buf = ct.create_string_buffer(4096)
    # va_list is passed on as the pointer libbpf gave us (x86-64 and arm64 alike).
    _libc.vsnprintf(buf, len(buf), fmt, args)
    _messages.append(buf.value.decode(errors="replace").rstrip("\n"))
    return 0


_print_cb = _PRINT_FN(_on_print)  # kept alive for the life of the process


class Libbpf:
    """The loaded library with typed functions. ``Libbpf.open()`` raises
    :class:`LibbpfMissing` or :class:`LibbpfTooOld`."""

    _cache: dict[str, Libbpf] = {}

    def __init__(self, lib: ct.CDLL, name: str) -> None:
        self.lib = lib
        self.name = name
        L = lib
        vp, cp, i, u32, sz = ct.c_void_p, ct.c_char_p, ct.c_int, ct.c_uint32, ct.c_size_t
        sig: dict[str, tuple[object, list[object]]] = {
            "libbpf_set_print": (vp, [_PRINT_FN]),
            "libbpf_version_string": (cp, []),
            "libbpf_num_possible_cpus": (i, []),
            "bpf_object__open_mem": (vp, [vp, sz, ct.POINTER(_OpenOpts)]),
            "bpf_object__load": (i, [vp]),
            "bpf_object__close": (None, [vp]),
            "bpf_object__btf": (vp, [vp]),
            "bpf_object__next_map": (vp, [vp, vp]),
            "bpf_object__find_map_by_name": (vp, [vp, cp]),
            "bpf_object__find_program_by_name": (vp, [vp, cp]),
            "bpf_map__name": (cp, [vp]),
            "bpf_map__fd": (i, [vp]),
            "bpf_map__set_max_entries": (i, [vp, u32]),
            "bpf_map__initial_value": (vp, [vp, ct.POINTER(sz)]),
            "bpf_program__attach": (vp, [vp]),
            "bpf_program__fd": (i, [vp]),
            "bpf_program__set_autoload": (i, [vp, ct.c_bool]),
            "bpf_link__destroy": (i, [vp]),
            "bpf_map_lookup_elem": (i, [i, vp, vp]),
            "bpf_map_update_elem": (i, [i, vp, vp, ct.c_uint64]),
            "bpf_map_delete_elem": (i, [i, vp]),
            "bpf_map_get_next_key": (i, [i, vp, vp]),
            "bpf_map_lookup_batch": (
                i,
                [i, vp, vp, vp, vp, ct.POINTER(u32), ct.POINTER(_BatchOpts)],
            ),
            "btf__parse": (vp, [cp, vp]),
            "btf__free": (None, [vp]),
            "btf__find_by_name_kind": (ct.c_int32, [vp, cp, u32]),
            "btf__type_by_id": (ct.POINTER(_BtfType), [vp, u32]),
            "btf__name_by_offset": (cp, [vp, u32]),
        }
        for fname, (res, args) in sig.items():
            f = getattr(L, fname)
            f.restype = res
            f.argtypes = args

    @classmethod
    def open(cls, name: str = DEFAULT_LIBRARY) -> Libbpf:
        """Load ``name`` (a soname or a path) once per process."""
        with _lock:
            if name in cls._cache:
                return cls._cache[name]
            try:
                lib = ct.CDLL(name, use_errno=True)
            except OSError as e:
                found = ctypes.util.find_library("bpf")
                hint = f" (an unversioned {found} exists)" if found else ""
                raise LibbpfMissing(f"cannot load {name}: {e}{hint}") from None
            missing = [f for f in _REQUIRED if not hasattr(lib, f)]
            if missing:
                raise LibbpfTooOld(
                    f"{name} lacks {', '.join(missing[:4])}: libbpf 1.0 or later is needed"
                )
            self = cls(lib, name)
            self.lib.libbpf_set_print(_print_cb)
            cls._cache[name] = self
            return self

    @property
    def version(self) -> str:
        v = self.lib.libbpf_version_string()
        return v.decode() if v else "?"

    def possible_cpus(self) -> int:
        n = int(self.lib.libbpf_num_possible_cpus())
        if n <= 0:
            raise LibbpfError("libbpf_num_possible_cpus", n)
        return n


@contextlib.contextmanager
def capture_messages() -> Iterator[list[str]]:
    """Collect what libbpf prints (warnings and info) while the block runs."""
    global _messages
    out: list[str] = []
    with _lock:
        _messages = out
    try:
        yield out
    finally:
        with _lock:
            _messages = None


def _check(what: str, rc: int) -> int:
    if rc < 0:
        raise LibbpfError(what, ct.get_errno() or -rc)
    return rc


def _ptr(what: str, p: int | None) -> int:
    if not p:
        raise LibbpfError(what, ct.get_errno() or errno.EINVAL)
    return p


@dataclass(frozen=True, slots=True)
class BtfFacts:
    """What the loader needs to know about a kernel's BTF before loading."""

    tracepoints: frozenset[str]  # of the names asked for, those with a BTF tracepoint
    sched_switch_args: int  # arguments of the sched_switch tracepoint (4 since 5.18)


def btf_facts(bpf: Libbpf, path: str, tracepoints: tuple[str, ...]) -> BtfFacts:
    """Parse a kernel BTF file (``/sys/kernel/btf/vmlinux``) for the tracepoints the
    probe attaches to: ``btf_trace_<name>`` typedefs, and how many arguments
    sched_switch passes (``prev_state`` became an argument in Linux 5.18)."""
    L = bpf.lib
    btf = _ptr(f"btf__parse({path})", L.btf__parse(path.encode(), None))
    try:
        present = set()
        switch_args = 0
        for tp in tracepoints:
            tid = L.btf__find_by_name_kind(btf, f"btf_trace_{tp}".encode(), BTF_KIND_TYPEDEF)
            if tid <= 0:
                continue
            present.add(tp)
            if tp == "sched_switch":
                switch_args = _proto_args(L, btf, tid)
        return BtfFacts(frozenset(present), switch_args)
    finally:
        L.btf__free(btf)


def struct_layout(bpf: Libbpf, path: str, name: str) -> tuple[int, dict[str, int]]:
    """A struct's size and member byte offsets, from the BTF of a file (an object's
    ``.BTF`` section or a kernel's BTF): what the C compiler really laid out."""
    L = bpf.lib
    btf = _ptr(f"btf__parse({path})", L.btf__parse(path.encode(), None))
    try:
        tid = L.btf__find_by_name_kind(btf, name.encode(), BTF_KIND_STRUCT)
        if tid <= 0:
            raise KeyError(f"struct {name} not in {path}")
        t = L.btf__type_by_id(btf, tid)
        vlen = int(t.contents.info) & 0xFFFF
        base = ct.addressof(t.contents) + ct.sizeof(_BtfType)
        members = (_BtfMember * vlen).from_address(base)
        offsets = {
            L.btf__name_by_offset(btf, m.name_off).decode(): int(m.offset) // 8 for m in members
        }
        return int(t.contents.size_type), offsets
    finally:
        L.btf__free(btf)


def _proto_args(L: ct.CDLL, btf: int, tid: int) -> int:
    """Typedef -> pointer -> function prototype: its parameter count minus the
    tracepoint's leading ``void *__data``."""
    for _ in range(4):
        t = L.btf__type_by_id(btf, tid)
        if not t:
            return 0
        info = int(t.contents.info)
        kind = (info >> 24) & 0x1F
        if kind == BTF_KIND_FUNC_PROTO:
            return max(0, (info & 0xFFFF) - 1)
        if kind not in (BTF_KIND_TYPEDEF, BTF_KIND_PTR):
            return 0
        tid = int(t.contents.size_type)
    return 0


class Link:
    def __init__(self, bpf: Libbpf, ptr: int) -> None:
        self._bpf, self._ptr = bpf, ptr

    def destroy(self) -> None:
        p, self._ptr = self._ptr, 0
        if p:
            self._bpf.lib.bpf_link__destroy(p)


class BpfObject:
    """An ELF object opened from memory, configured, then loaded and attached.

    Lifecycle: ``open`` -> ``set_max_entries`` / ``rodata`` writes -> ``load`` ->
    ``attach`` -> map access -> ``close`` (detaches and frees everything).
    """

    def __init__(
        self,
        bpf: Libbpf,
        data: bytes,
        name: str,
        *,
        btf_custom_path: str | None = None,
        log_size: int = 1 << 20,
    ) -> None:
        self.bpf = bpf
        self._data = ct.create_string_buffer(data, len(data))  # libbpf copies; keep anyway
        self._log = ct.create_string_buffer(log_size) if log_size else None
        self._name = ct.c_char_p(name.encode())
        self._btf_path = ct.c_char_p(btf_custom_path.encode()) if btf_custom_path else None
        opts = _OpenOpts()
        opts.sz = ct.sizeof(_OpenOpts)
        opts.object_name = self._name.value
        opts.btf_custom_path = self._btf_path.value if self._btf_path else None
        if self._log is not None:
            opts.kernel_log_buf = ct.cast(self._log, ct.c_void_p)
            opts.kernel_log_size = log_size
            opts.kernel_log_level = 0  # the log only on failure (level 1 when it fails)
        self._obj = _ptr(
            "bpf_object__open_mem",
            bpf.lib.bpf_object__open_mem(self._data, len(data), ct.byref(opts)),
        )
        self._links: list[Link] = []

    @property
    def verifier_log(self) -> str:
        return self._log.value.decode(errors="replace") if self._log is not None else ""

    def map_ptr(self, name: str) -> int:
        return _ptr(
            f"map {name}", self.bpf.lib.bpf_object__find_map_by_name(self._obj, name.encode())
        )

    def map_names(self) -> list[str]:
        out: list[str] = []
        m = None
        while True:
            m = self.bpf.lib.bpf_object__next_map(self._obj, m)
            if not m:
                return out
            out.append(self.bpf.lib.bpf_map__name(m).decode())

    def set_max_entries(self, name: str, n: int) -> None:
        _check(
            f"set_max_entries({name})", self.bpf.lib.bpf_map__set_max_entries(self.map_ptr(name), n)
        )

    def section_data(self, map_name: str) -> ct.Array[ct.c_char]:
        """The writable initial contents of a global-data map (``.rodata``), before load."""
        size = ct.c_size_t(0)
        p = _ptr(
            f"initial value of {map_name}",
            self.bpf.lib.bpf_map__initial_value(self.map_ptr(map_name), ct.byref(size)),
        )
        return (ct.c_char * size.value).from_address(p)

    def set_autoload(self, prog: str, on: bool) -> None:
        p = _ptr(
            f"program {prog}",
            self.bpf.lib.bpf_object__find_program_by_name(self._obj, prog.encode()),
        )
        _check(f"set_autoload({prog})", self.bpf.lib.bpf_program__set_autoload(p, on))

    def load(self) -> None:
        _check("bpf_object__load", self.bpf.lib.bpf_object__load(self._obj))

    def attach(self, prog: str) -> None:
        p = _ptr(
            f"program {prog}",
            self.bpf.lib.bpf_object__find_program_by_name(self._obj, prog.encode()),
        )
        link = _ptr(f"attach {prog}", self.bpf.lib.bpf_program__attach(p))
        self._links.append(Link(self.bpf, link))

    def program_fd(self, prog: str) -> int:
        p = self.bpf.lib.bpf_object__find_program_by_name(self._obj, prog.encode())
        return int(self.bpf.lib.bpf_program__fd(p)) if p else -1

    def map_fd(self, name: str) -> int:
        return _check(f"fd of {name}", self.bpf.lib.bpf_map__fd(self.map_ptr(name)))

    def detach(self) -> None:
        for link in self._links:
            link.destroy()
        self._links.clear()

    def close(self) -> None:
        self.detach()
        obj, self._obj = self._obj, 0
        if obj:
            self.bpf.lib.bpf_object__close(obj)


class MapFd:
    """Reads and writes of one map by file descriptor (keys and values as bytes)."""

    def __init__(self, bpf: Libbpf, fd: int, key_size: int, value_size: int) -> None:
        self.bpf, self.fd = bpf, fd
        self.key_size, self.value_size = key_size, value_size
        self.batch_ok = True

    def lookup(self, key: bytes) -> bytes | None:
        v = ct.create_string_buffer(self.value_size)
        rc = self.bpf.lib.bpf_map_lookup_elem(self.fd, key, v)
        if rc < 0:
            err = ct.get_errno() or -rc
            if err == errno.ENOENT:
                return None
            raise LibbpfError("bpf_map_lookup_elem", err)
        return v.raw

    def update(self, key: bytes, value: bytes) -> None:
        _check("bpf_map_update_elem", self.bpf.lib.bpf_map_update_elem(self.fd, key, value, 0))

    def delete(self, key: bytes) -> bool:
        rc = self.bpf.lib.bpf_map_delete_elem(self.fd, key)
        if rc < 0:
            err = ct.get_errno() or -rc
            if err == errno.ENOENT:
                return False
            raise LibbpfError("bpf_map_delete_elem", err)
        return True

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every entry: batch lookups where the kernel has them (5.6+ for hash maps),
        else key-by-key iteration."""
        if self.batch_ok:
            try:
                return self._items_batch()
            except LibbpfError as e:
                if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
                self.batch_ok = False
        return self._items_iter()

    def _items_batch(self, chunk: int = 1024) -> list[tuple[bytes, bytes]]:
        ks, vs = self.key_size, self.value_size
        keys = ct.create_string_buffer(ks * chunk)
        vals = ct.create_string_buffer(vs * chunk)
        # Hash maps return their bucket cursor (a u32) in the batch tokens.
        tok_in = ct.create_string_buffer(max(8, ks))
        tok_out = ct.create_string_buffer(max(8, ks))
        opts = _BatchOpts(sz=ct.sizeof(_BatchOpts))
        out: list[tuple[bytes, bytes]] = []
        first = True
        while True:
            count = ct.c_uint32(chunk)
            rc = self.bpf.lib.bpf_map_lookup_batch(
                self.fd,
                None if first else tok_in,
                tok_out,
                keys,
                vals,
                ct.byref(count),
                ct.byref(opts),
            )
            err = (ct.get_errno() or -rc) if rc < 0 else 0
            if rc < 0 and err != errno.ENOENT:
                if err == errno.ENOSPC:  # a bucket bigger than the chunk: grow
                    chunk *= 4
                    keys = ct.create_string_buffer(ks * chunk)
                    vals = ct.create_string_buffer(vs * chunk)
                    continue
                raise LibbpfError("bpf_map_lookup_batch", err)
            kraw, vraw = keys.raw, vals.raw
            for i in range(count.value):
                out.append((kraw[i * ks : (i + 1) * ks], vraw[i * vs : (i + 1) * vs]))
            if err == errno.ENOENT:  # no more entries
                return out
            ct.memmove(tok_in, tok_out, len(tok_out))
            first = False

    def _items_iter(self) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        key = ct.create_string_buffer(self.key_size)
        nxt = ct.create_string_buffer(self.key_size)
        cur = None
        while self.bpf.lib.bpf_map_get_next_key(self.fd, cur, nxt) == 0:
            ct.memmove(key, nxt, self.key_size)
            cur = key
            v = self.lookup(key.raw)
            if v is not None:
                out.append((key.raw, v))
        return out
