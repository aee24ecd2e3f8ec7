"""One way to read a YAML configuration file: safely, strictly, and validated against
its JSON Schema (``exporter/data/*.schema.json``).

The thresholds file (``--config.file``), the metadata file (``--metadata.file``) and the
web configuration (``--web.config.file``) go through here:

* **reading**: at most :data:`MAX_CONFIG_BYTES`, non-blocking, regular files only,
  strict UTF-8;
* **YAML**: PyYAML's safe loader, minus what makes a small file expensive or
  ambiguous: aliases are refused (a "billion laughs" document fails at its first
  ``*alias``, before anything is expanded), nesting deeper than :data:`MAX_DEPTH`,
  duplicate keys, keys that are not strings, integers longer than
  :data:`MAX_INT_DIGITS` digits and floats that are not finite;
* **schema**: types are strict (``"false"`` is not a boolean, ``true`` is not a
  number), every number has bounds; the first problem is reported as one line naming
  the file, the key and the value.

:class:`WatchedFile` re-reads a file when it, or a file it names, changes and keeps the
last good contents when an edit is bad: logged once per bad version, counted for
``contention_config_reload_failures_total``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from .cgroupfs.errors import CgroupParseError
from .cgroupfs.files import read_bytes

if TYPE_CHECKING:  # imported where a file is validated: ≈ 4 MB a default run never needs
    import jsonschema

log = logging.getLogger(__name__)

MAX_CONFIG_BYTES = 4 << 20  # a metadata file for 10,000 cgroups is ~1.5 MiB
MAX_DEPTH = 32  # our files nest 3 levels deep
MAX_INT_DIGITS = 30  # far above any bound in a schema, far below int()'s slow sizes


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message is one line that names
    the file and, when it is about a value, the key and the value."""


# -- YAML ------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """The safe loader without aliases, deep nesting, duplicate or non-string keys,
    huge integers or non-finite floats."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise _problem(event.start_mark, f"YAML aliases (*{event.anchor}) are not allowed")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _problem(mark, f"nested deeper than {MAX_DEPTH}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                raise _problem(key_node.start_mark, "keys must be strings")
            if key_node.value in seen:
                raise _problem(key_node.start_mark, f"duplicate key {_short(key_node.value)}")
            seen.add(key_node.value)
        return super().construct_mapping(node, deep)


def _construct_int(loader: yaml.SafeLoader, node: ScalarNode) -> int:
    if sum(c.isdigit() for c in node.value) > MAX_INT_DIGITS:
        raise _problem(node.start_mark, f"integer with more than {MAX_INT_DIGITS} digits")
    value: int = loader.construct_yaml_int(node)
    return value


def _construct_float(loader: yaml.SafeLoader, node: ScalarNode) -> float:
    value: float = loader.construct_yaml_float(node)
    if not math.isfinite(value):
        raise _problem(node.start_mark, f"{node.value} is not a finite number")
    return value


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


class _YamlProblem(Exception):
    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")


def _problem(mark: Any, what: str) -> _YamlProblem:
    return _YamlProblem(f"line {mark.line + 1}", what)


def load_yaml(data: bytes, source: str) -> Any:
    """A YAML document from the bytes of ``source`` (errors: :class:`ConfigError`)."""
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{source}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)  # the reader checks the characters here
        return loader.get_single_data()
    except _YamlProblem as e:
        raise ConfigError(f"{source}: {e}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        what = e.problem or e.context or "not valid YAML"
        raise ConfigError(f"{source}: not valid YAML: {where}{what}") from None
    except yaml.reader.ReaderError as e:
        raise ConfigError(
            f"{source}: not valid YAML: character #x{e.character:04x} at offset {e.position} "
            "is not allowed"
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {str(e).splitlines()[0]}") from None
    except RecursionError:  # pragma: no cover - MAX_DEPTH stops nesting long before
        raise ConfigError(f"{source}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_config(path: str, max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
    """A configuration file's bytes (errors: :class:`ConfigError`, naming the file)."""
    try:
        data = read_bytes(path, max_bytes)
    except CgroupParseError as e:
        raise ConfigError(f"{path}: {e.reason}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    if data is None:
        raise ConfigError(f"{path}: no such file")
    return data


# -- schema ----------------------------------------------------------------------------


@cache
def schema(name: str) -> Mapping[str, Any]:
    """A packaged JSON Schema (``exporter/data/<name>.schema.json``), checked once."""
    text = (resources.files("exporter") / "data" / f"{name}.schema.json").read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(doc)
    return doc


def validate(doc: Any, schema_name: str, source: str) -> None:
    """Raise :class:`ConfigError` for the first way ``doc`` breaks the schema (in key
    order), as one line: ``<file>: <key>: <what is wrong> (got <value>)``."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema(schema_name))
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return
    first = errors[0]
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    raise ConfigError(f"{source}: {describe(first)}{more if len(errors) > 1 else ''}")


_TYPES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "number": "a number",
    "integer": "a whole number",
    "boolean": "true or false",
    "null": "empty",
}


def key_path(path: Iterable[Any]) -> str:
    """``cgroups./a.cpu_request``-style path of a value in a document."""
    return ".".join(str(p) for p in path) or "(top level)"


def describe(e: jsonschema.ValidationError) -> str:
    """One schema error as ``<key>: <what is wrong> (got <value>)``."""
    where = f"{key_path(e.absolute_path)}: " if e.absolute_path else ""
    sub: Mapping[str, Any] = e.schema if isinstance(e.schema, Mapping) else {}
    got = "" if sub.get("x-secret") else f" (got {_value(e.instance)})"  # never a password
    hint = sub.get("x-hint")  # "<key>: must be <hint> (got <value>)"
    v, arg = e.validator, e.validator_value
    if v == "additionalProperties" and isinstance(e.instance, Mapping):
        known = sorted(sub.get("properties", {}))
        unknown = sorted(_key(k) for k in e.instance if k not in known)
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        return (
            f"{where}unknown key(s) {', '.join(unknown[:5])}{more}; "
            f"known keys: {', '.join(known)}"
        )
    if v == "required":
        return f"{where}{e.message}"
    if hint:
        return f"{where}must be {hint}{got}"
    if isinstance(sub.get("x-not"), str):  # for a value named in the message: a key, an item
        return f"{where}{_value(e.instance)} is not {sub['x-not']}"
    if v == "type":
        types = [arg] if isinstance(arg, str) else list(arg) if isinstance(arg, list) else []
        return f"{where}must be {' or '.join(_TYPES.get(t, t) for t in types)}{got}"
    bounds = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
    if v in bounds:
        return f"{where}must be {bounds[str(v)]} {arg}{got}"
    if v in ("minItems", "maxItems"):
        return f"{where}must have {'at least' if v == 'minItems' else 'at most'} {arg} item(s){got}"
    if v in ("minLength", "maxLength"):
        word = "at least" if v == "minLength" else "at most"
        return f"{where}must be {word} {arg} characters long{got}"
    if v == "maxProperties":
        return f"{where}must have at most {arg} keys{got}"
    return f"{where}{e.message[:200]}"


def _key(k: object) -> str:
    text = str(k)
    simple = text.isprintable() and " " not in text and len(text) <= 60
    return text if simple else _short(text)


def _short(text: str, most: int = 60) -> str:
    return repr(text) if len(text) <= most else f"{text[:most]!r}... ({len(text)} characters)"


def _value(v: Any) -> str:
    """A value for a message: short, whatever its size."""
    if isinstance(v, str):
        return _short(v)
    if isinstance(v, Mapping):
        return f"a mapping of {len(v)} key(s)"
    if isinstance(v, list) and len(v) > 3:
        return f"a list of {len(v)} item(s)"
    text = repr(v)
    return text if len(text) <= 60 else f"{text[:60]}... ({len(text)} characters)"


# -- watching a file -------------------------------------------------------------------

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ConfigFileStatus:
    """A watched file's state, for ``contention_config_*``."""

    path: str
    kind: str  # "thresholds", "metadata" or "web"
    last_reload_ok: bool
    reload_failures_total: int
    last_error: str


class WatchedFile(Generic[T]):
    """A configuration file read at start and again whenever it changes.

    ``parse`` turns the file's bytes into the value (raising :class:`ConfigError`).
    :meth:`load` is the start: any problem raises. :meth:`poll` is the run: a changed
    file is read again; if it is bad the last good value stays, the problem is logged
    once for that version of the file and counted. ``names`` lists the other files a
    value was built from (certificates, keys): a change to one of them is a change of
    the file. ``check(old, new)`` may refuse a change that parses (:class:`ConfigError`).
    """

    def __init__(
        self,
        path: str,
        kind: str,
        parse: Callable[[bytes, str], T],
        *,
        names: Callable[[T], Iterable[str]] | None = None,
        check: Callable[[T, T], None] | None = None,
        max_bytes: int = MAX_CONFIG_BYTES,
    ) -> None:
        self.path = path
        self.kind = kind
        self._parse = parse
        self._names = names
        self._check = check
        self._max_bytes = max_bytes
        self._version: tuple[object, ...] | None = None  # the version last tried
        self._failures = 0
        self._ok = True
        self._error = ""
        self._lock = threading.Lock()
        self.value: T = self.load()

    def load(self) -> T:
        own = self._stat()
        value = self._read()
        self._version = self._version_of(own, value)
        return value

    def poll(self) -> bool:
        """Take a changed file if it is good; True when the value changed. Never
        raises: a bad or missing file keeps the last good value."""
        try:
            own = self._stat()
        except ConfigError as e:
            return self._failed((), str(e))
        version = self._version_of(own, self.value)
        if version == self._version:
            return False
        try:
            value = self._read()
            if self._check is not None:
                self._check(self.value, value)
        except ConfigError as e:
            return self._failed(version, str(e))
        except Exception as e:  # a bug in a parser must not stop the sampler
            return self._failed(version, f"{self.path}: {type(e).__name__}: {e}")
        with self._lock:
            self.value, self._ok, self._error = value, True, ""
            self._version = self._version_of(own, value)
        log.info("%s file %s reloaded", self.kind, self.path)
        return True

    def status(self) -> ConfigFileStatus:
        with self._lock:
            return ConfigFileStatus(self.path, self.kind, self._ok, self._failures, self._error)

    def _read(self) -> T:
        return self._parse(read_config(self.path, self._max_bytes), self.path)

    def _failed(self, version: tuple[object, ...], error: str) -> bool:
        if version == self._version:
            return False  # this version was tried and said already
        with self._lock:
            self._version, self._ok, self._error = version, False, error
            self._failures += 1
        log.warning("%s file not reloaded, keeping the last good contents: %s", self.kind, error)
        return False

    def _stat(self) -> tuple[int, ...]:
        try:
            return _stat(self.path)
        except OSError as e:
            raise ConfigError(f"{self.path}: cannot read: {e.strerror}") from None

    def _version_of(self, own: tuple[int, ...], value: T) -> tuple[object, ...]:
        """The file's stat and those of the files ``value`` names (a missing one: its
        error, so that it coming back is a change too)."""
        named: list[object] = []
        for name in self._names(value) if self._names is not None else ():
            try:
                named.append(_stat(name))
            except OSError as e:
                named.append(f"{name}: {e.strerror}")
        return (own, *named)


def _stat(path: str) -> tuple[int, ...]:
    """What changes when a file is edited, replaced or swapped under a symlink (a
    Kubernetes ConfigMap or Secret volume swaps a ..data link)."""
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev, st.st_ctime_ns)
