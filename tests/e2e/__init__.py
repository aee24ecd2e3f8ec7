"""End-to-end tests: the real Prometheus and Alertmanager."""
