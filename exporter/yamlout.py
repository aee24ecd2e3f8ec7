"""The one YAML writer of generated files: the rule pack, the dashboards' ConfigMaps,
the thresholds the commands print.

Block style, keys in the order given (the generators order them for readers), text
as UTF-8, a string with line breaks as a literal block (``|``: PromQL and
descriptions stay readable and diff line by line), and never an anchor or alias: a
value that appears twice is written twice, so each file reads on its own.
"""

from __future__ import annotations

from typing import Any

import yaml

WIDTH = 100  # where PyYAML folds long plain scalars


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(doc: Any, *, width: int = WIDTH) -> str:
    """``doc`` (plain data: mappings, lists, scalars) as a YAML document."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=width, allow_unicode=True)
