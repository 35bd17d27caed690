"""``portfed flower superlink``: Flower's SuperLink with the parties' API on a listener of its own.

flwr 1.41's ``flower-superlink`` serves all its HTTP APIs on one port (``--host``/``--port``): the
**Fleet** API the SuperNodes use (``/v1/fleet/…``), the **Control** API of the ``flwr`` CLI (``flwr
run``, ``flwr supernode register``, ``flwr ls``, ``/v1/control/…``) and the **Runtime** API of the
ServerApp and its executor (``/v1/runtime/…``); its ``--fleet-api-address`` and
``--control-api-address`` are deprecated and no longer move an API to another address.  The
open-source Control and Runtime APIs authenticate no one (TLS only proves the server), so whoever
reaches that port can register a node key of its own, submit a Flower App — code that runs on the
SuperLink's host and on every SuperNode — or read a run's messages.

:func:`main` builds the very same SuperLink — flwr's own argument parser (every ``flower-superlink``
option works), FastAPI app and lifespan (the executor of the ServerApps, node authentication) — and
serves it on two listeners in one process, both with the SuperLink's TLS certificates:

* the **operator's** listener, ``--host``/``--port`` (default ``127.0.0.1:9091``): every API, for the
  ``flwr`` CLI and the ServerApp's executor on the SuperLink's host;
* the **parties'** listener, ``--fleet-host``/``--fleet-port`` (default ``127.0.0.1:9092``): only the
  routes of flwr's Fleet router (:data:`FLEET_PATHS`, exact paths); anything else gets ``404`` and is
  never passed to the app.

Only the parties' listener should be reachable from the parties' networks (docs/flower.md, "Threat
model").  This uses flwr's internal ``_parse_superlink_lifespan_config``: it is tied to the pinned
``flwr==1.41.0`` (``tests/test_flower_listeners.py`` checks the outcome on a real SuperLink).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPERATOR_DEFAULT = ("127.0.0.1", 9091)
FLEET_DEFAULT = ("127.0.0.1", 9092)
logger = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address or ``localhost``) is the machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def fleet_paths() -> frozenset[str]:
    """The exact paths of flwr's Fleet API (``/v1/fleet/register-node``, ``/v1/fleet/pull-messages``, …)."""
    from flwr.superlink.routers.fleet.router import router

    return frozenset(route.path for route in router.routes)  # type: ignore[attr-defined]


class FleetOnly:
    """An ASGI app that passes ``app`` only the HTTP requests whose path is one of ``paths``; every other
    request gets ``404`` (and a WebSocket is closed) without reaching ``app``."""

    def __init__(self, app: ASGIApp, paths: frozenset[str]) -> None:
        self.app, self.paths = app, paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in self.paths:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        elif scope["type"] == "http":
            body = b"not served on the parties' listener: only the Fleet API is\n"
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})


class _Listener(uvicorn.Server):
    """A uvicorn server that leaves the signals to :func:`serve_both` (two servers share one process)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """portfed's options (``--fleet-host``, ``--fleet-port``) and the ``flower-superlink`` arguments left,
    with ``--host``/``--port`` defaulting to :data:`OPERATOR_DEFAULT`."""
    parser = argparse.ArgumentParser(prog="portfed flower superlink", add_help=False)
    parser.add_argument("--fleet-host", default=FLEET_DEFAULT[0])
    parser.add_argument("--fleet-port", type=int, default=FLEET_DEFAULT[1])
    ours, rest = parser.parse_known_args(list(argv))
    if not 1 <= ours.fleet_port <= 65535:
        raise SystemExit(f"--fleet-port must be between 1 and 65535, got {ours.fleet_port}")
    given = {a.split("=")[0] for a in rest}
    rest += [] if "--host" in given else ["--host", OPERATOR_DEFAULT[0]]
    rest += [] if "--port" in given else ["--port", str(OPERATOR_DEFAULT[1])]
    return ours, rest


async def serve_both(servers: Sequence[uvicorn.Server]) -> None:
    """Run ``servers`` until SIGTERM or SIGINT, then stop them all."""

    def stop(*_: object) -> None:
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    await asyncio.gather(*(server.serve() for server in servers))


def main(argv: Sequence[str] | None = None) -> None:
    """The SuperLink of ``argv`` (module docstring)."""
    from flwr.supercore.http_logging import get_uvicorn_log_config
    from flwr.supercore.logger import console_handler
    from flwr.superlink.cli.flower_superlink import SuperLinkLifespan, _parse_superlink_lifespan_config
    from flwr.superlink.main import create_app

    ours, rest = parse(sys.argv[1:] if argv is None else argv)
    sys.argv = ["flower-superlink", *rest]  # flwr's parser reads sys.argv
    config = _parse_superlink_lifespan_config()
    if (ours.fleet_host, ours.fleet_port) == (config.host, config.port):
        raise SystemExit("the parties' listener (--fleet-host/--fleet-port) must differ from the operator's "
                         "(--host/--port)")
    if not is_loopback(config.host):
        logger.warning("the operator's listener %s:%s serves the Control API, which authenticates no one: keep it "
                       "behind a firewall (docs/flower.md, Threat model)", config.host, config.port)
    app = create_app(config, SuperLinkLifespan)
    common = {"log_config": get_uvicorn_log_config(console_handler.level), "access_log": True,
              "ssl_keyfile": config.ssl_keyfile, "ssl_certfile": config.ssl_certfile}
    operator = _Listener(uvicorn.Config(app, host=config.host, port=config.port, lifespan="on", **common))
    parties = _Listener(uvicorn.Config(FleetOnly(app, fleet_paths()), host=ours.fleet_host, port=ours.fleet_port,
                                       lifespan="off", **common))
    asyncio.run(serve_both([operator, parties]))


if __name__ == "__main__":
    main()
