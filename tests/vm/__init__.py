"""The VM lane: a pure cgroup v2 guest (qemu, TCG) and the tests that run inside it."""
