"""Is a Ray cluster there? A bounded probe of the address a command is to join, before ``ray.init``.

``ray.init(address=...)`` retries an address where no cluster answers for minutes (over 400 s seen for
``RAY_ADDRESS=127.0.0.1:1``, issue 47), and holds SIGTERM back meanwhile (it is called under
:func:`~raycolloc.driver.signals.shielded`), so a sweep given a dead address could neither fail nor be
stopped, and ``queue submit`` after its ``serve`` had ended (a stale ``ray-address`` file) hung. The
probe, at most ``PROBE_S`` and with SIGTERM taken as everywhere else, dials where Ray would (a loopback
host is the node's own address to ``ray.init``) and speaks the first words of gRPC, which Ray's GCS
(and a Ray Client server) talk: an HTTP/2 connection preface, answered by a SETTINGS frame. Where
nothing accepts the connection, or what does is no gRPC server (a web server on that port), it raises
:class:`RayUnreachable`, naming the address and where it came from. With ``RAY_USE_TLS`` on, the GCS
expects TLS first, and only the connection is checked.
"""

from __future__ import annotations

import os
import socket
import time

from raycolloc.config_checks import ConfigError

__all__ = ["PROBE_S", "RayUnreachable", "probe"]

# How long the probe waits in all: a GCS on the same network answers in milliseconds; 5 s allow a slow
# link, and keep a wrong address's refusal prompt.
PROBE_S = 5.0
# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113, 3.4): a gRPC server answers
# with a SETTINGS frame of its own, whose 9-byte header has type 0x4 at byte 3.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS = 0x4


class RayUnreachable(ConfigError):
    """No Ray cluster answers at the address the command was given (``cluster.address`` or
    ``RAY_ADDRESS``); the message names it and where it came from."""


def probe(address: str, source: str, timeout_s: float = PROBE_S) -> None:
    """Check that a Ray cluster answers where Ray would dial ``address`` (given as ``source``).

    Raises:
        RayUnreachable: nothing accepted the connection, or what did gave no gRPC answer, in ``timeout_s``.
    """
    target = _dialled(address)
    if target is None:
        return  # "auto" or "local": Ray finds or starts the instance itself
    host, port = target
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return
            answer = _grpc_answer(conn, deadline)
    except OSError as exc:  # ConnectionRefusedError, TimeoutError, socket.gaierror (no such host)
        why = "no answer" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc.strerror or exc}"
        at = f"{host}:{port}" + ("" if address.endswith(f"{host}:{port}") else f" (what Ray dials for {address})")
        raise _unreachable(address, source, f"no Ray cluster answers at {at} ({why})", timeout_s) from None
    if len(answer) < 9 or answer[3] != _SETTINGS:
        said = f"it said {answer[:24]!r}" if answer else "it said nothing"
        what = f"{host}:{port} answers, but not as a Ray cluster's GCS does (gRPC; {said})"
        raise _unreachable(address, source, what, timeout_s)


def _grpc_answer(conn: socket.socket, deadline: float) -> bytes:
    """The first 9 bytes the server sends after the HTTP/2 preface (fewer: it closed or timed out)."""
    conn.sendall(_PREFACE)
    answer = b""
    while len(answer) < 9:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        conn.settimeout(left)
        try:
            chunk = conn.recv(9 - len(answer))
        except TimeoutError:
            break
        if not chunk:
            break
        answer += chunk
    return answer


def _unreachable(address: str, source: str, what: str, timeout_s: float) -> RayUnreachable:
    unset = "; or unset RAY_ADDRESS to start a local instance" if source == "RAY_ADDRESS" else ""
    return RayUnreachable(
        f"{source}={address}: {what} within {timeout_s:g} s. Start a cluster there (`ray start --head`), or give "
        f"the address `ray status` prints{unset}"
    )


def _dialled(address: str) -> tuple[str, int] | None:
    """The host and port Ray connects to for ``address``: a loopback host is replaced by the node's own
    address as ``ray.init`` does (a GCS bound to that address only is not reached through 127.0.0.1);
    None where Ray looks the address up itself."""
    if address.startswith("ray://"):  # Ray Client: its server at host:port, as given
        host, _, port = address.removeprefix("ray://").partition("/")[0].rpartition(":")
        return (host.strip("[]"), int(port)) if host and port.isdigit() else None
    if address in ("auto", "local"):
        return None
    from ray._private.services import canonicalize_bootstrap_address  # private: the resolution ray.init uses

    try:
        canonical = canonicalize_bootstrap_address(address)
    except Exception:  # noqa: BLE001 - a malformed address: ray.init gives its own error for it
        return None
    host, _, port = (canonical or "").rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None  # [::1]:6379: IPv6 in brackets
