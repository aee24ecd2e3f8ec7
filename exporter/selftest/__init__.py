"""The self-test (``contention-exporter selftest``, ``POST /selftest``): a victim and a
bully in cgroups of its own, observed by the exporter's own sampler, window and probe,
and judged against the kernel's accounting (docs/troubleshooting.md)."""
