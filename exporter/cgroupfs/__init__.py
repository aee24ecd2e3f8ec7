"""Readers of cgroup and proc files, the lowest layer: no Prometheus imports, no
global paths, and the only package a sampler pass reads files in.

``parsers`` (pure: file text in, dataclasses of ``model`` out), ``reader`` (one
cgroup's files), ``procfs`` (the node's ``stat``, ``pressure/*``, ``meminfo``),
``discovery`` (walk and classify the cgroup tree), ``mode`` (the node's layout, PSI,
BTF). Every reader takes an explicit filesystem root, so tests run them on fixture
trees under ``tests/fixtures/``.
"""
