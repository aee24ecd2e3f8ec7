"""Exposition: the Prometheus families of a pass, built once per pass, and their bytes.

``registry`` lists the collectors in exposition order (``build_info``, ``node``,
``containers`` and the optional per-container ones, ``probe``, ``findings``,
``process``, ``kube``, ``config``, ``http``, ``status``), each a function of one
``inputs.Context`` (the pass and the live sources) that builds catalog families
(``exporter.catalog``) with ``series``; ``text`` renders them (text 0.0.4 /
OpenMetrics); ``published`` holds the pass every request is served from and renders it
once per pass and format.
"""
