"""portfed on Flower's deployment runtime: every party on its own SuperNode (issue: parties on their
own machines).

* :mod:`.node` — a party on its machine (no Flower import): built from its own config, its state on
  its disk; :mod:`.local_noise` — the seed of its local-DP noise (its secret key) and its one answer per round;
* :mod:`.wire` — the messages (Flower records) between the ServerApp and a party;
* :mod:`.client` — a ClientApp's answer to one message;
* :mod:`.cohort` — :class:`~portfed.federation.Cohort` over SuperNodes (push, bounded poll, partial
  participation on missing replies);
* :mod:`.server` — the ServerApp's comparison (the in-process runner with remote parties);
* :mod:`.secure` — secure aggregation: Flower's SecAgg+ for a round of the mean family;
* :mod:`.certs`, :mod:`.processes`, :mod:`.launch` — test certificates and keys, the SuperLink and
  SuperNode processes, ``portfed flower launch``.

The Flower App itself (``flower_app/``, a thin package with its own ``pyproject.toml``) only wires
:func:`.server.serve` and :func:`.client.answer` to Flower's ``ServerApp`` and ``ClientApp``.  The
in-process engines never import this package, nor Flower.
"""
