"""TLS settings for prefctl's HTTP clients: verification always on, plus the profile's CA bundle.

``ca_bundle`` *adds* a CA (a development CA from ``prefctl certs init``, a corporate proxy's CA) to
the usual trust store instead of replacing it, so one profile can reach both a local emulator with
a development certificate and public services.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from prefctl.errors import ConfigError

__all__ = ["ssl_context"]


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
