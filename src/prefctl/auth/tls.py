"""TLS settings for prefctl's HTTP clients: verification always on, plus the profile's CA bundle.

``ca_bundle`` *adds* a CA (a development CA from ``prefctl certs init``, a corporate proxy's CA) to
the usual trust store instead of replacing it, so one profile can reach both a local emulator with
a development certificate and public services.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from prefctl.errors import ConfigError

__all__ = ["context_for", "ssl_context"]


def ssl_context(ca_bundle: Path | None = None) -> ssl.SSLContext:
    """A verifying client context trusting certifi's roots and, if given, ``ca_bundle``."""
    import certifi

    context = ssl.create_default_context(cafile=certifi.where())
    if ca_bundle is not None:
        try:
            context.load_verify_locations(cafile=str(ca_bundle))
        except FileNotFoundError:
            raise ConfigError(f"the CA bundle {ca_bundle} does not exist") from None
        except (OSError, ssl.SSLError, ValueError):
            raise ConfigError(
                f"the CA bundle {ca_bundle} holds no usable PEM certificate",
                hint="ca_bundle must be a PEM file of one or more CA certificates",
            ) from None
    return context


def context_for(url: str, ca_bundle: Path | None = None) -> ssl.SSLContext:
    """The context of a client whose requests all go to ``url``'s scheme and host: ``ssl_context``
    for https; for http, one that verifies like any other but trusts no CA, which spares loading
    the CA roots (about 25 ms of a command's start-up) for a connection that never uses them
    (a request that went to https anyway would fail verification, not skip it)."""
    if url.startswith("https:"):
        return ssl_context(ca_bundle)
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname, no roots
