"""Exposition: the Prometheus families of a pass, built once per pass, and their bytes.

``node``, ``containers``, ``probe``, ``findings``, ``kube`` and ``status`` build the
families; ``text`` renders them (text 0.0.4 / OpenMetrics); ``published`` holds the
pass every request is served from and renders it once per pass and format.
"""
