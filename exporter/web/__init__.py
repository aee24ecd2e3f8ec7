"""The HTTP front's transport, below the routes of ``exporter.server``.

* ``listen``: ``--web.listen-address`` into listening sockets (IPv4 and IPv6).
* ``config``: ``--web.config.file`` in exporter-toolkit's format (TLS, client
  certificates, basic auth, headers, rate limit), re-read when its files change.
* ``tls``: its ``tls_server_config`` into an SSL context, and the client SAN check.
* ``auth``: basic auth against bcrypt hashes.
* ``transport``: the asyncio HTTP/1.1 server (h11) with bounded threads, connections
  and timeouts, which hands each request to a WSGI application.
"""
