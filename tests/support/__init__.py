"""Test machinery shared by the suites and the generated-file checks (not shipped):
the scenario corpus (``corpus``) and the promtool unit tests rendered from it
(``promtool_tests``; ``python -m tests.support.promtool_tests`` writes or checks
``rules/tests/contention.rules.test.yaml``)."""
