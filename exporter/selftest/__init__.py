"""The self-test (``contention-exporter selftest``, ``POST /selftest``): a victim and a
bully in cgroups of its own, observed by the exporter's own sampler, window and probe,
and judged against the kernel's accounting (docs/troubleshooting.md)."""

# How long the self-test waits for its finding, unless asked otherwise; here, not in
# ``run``, so the command line's defaults do not import the self-test (every command's
# parser is built when the exporter starts).
DEFAULT_SECONDS = 240.0
