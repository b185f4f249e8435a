"""Which hosts are this machine: the one rule for "loopback" shared by every layer.

Kept free of heavy imports: the configuration checks it on the start-up fast path.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["is_loopback"]


def is_loopback(url: str) -> bool:
    """True when ``url``'s host is this machine: ``localhost``, ``127.0.0.0/8`` or ``::1``."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
