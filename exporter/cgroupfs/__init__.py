"""Pure readers of cgroup and proc files: no Prometheus imports, no global paths.

Every function takes file text (parsers) or an explicit filesystem root (readers),
so tests run them on fixture trees under ``tests/fixtures/``.
"""
