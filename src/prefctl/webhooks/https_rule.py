"""The service's rule for webhook URLs: HTTPS is mandatory (the service documentation,
Authentication: "HTTPS is mandatory"). The signature does not cover the body, so a plain-http
receiver on a network could be fed altered events.

A plain ``http://`` URL is allowed only to a loopback host (127.0.0.0/8, ::1, localhost), for local
work; the emulator's account setting ``AllowHttpWebhooks`` lifts the rule for a private test
network. The emulator's API refuses such a Url with a 400 naming the rule, and its dispatcher
does not send to one (a subscription stored before the rule existed).

    >>> https_problem("http://hooks.example.com/x", allow_http=False) is not None
    True
    >>> https_problem("http://127.0.0.1:8751/webhooks", allow_http=False) is None
    True
"""

from __future__ import annotations

from urllib.parse import urlsplit

from prefctl.hosts import is_loopback

__all__ = ["ALLOW_HTTP_SETTING", "HTTPS_RULE", "https_problem"]

ALLOW_HTTP_SETTING = "AllowHttpWebhooks"
HTTPS_RULE = (
    "HTTPS is mandatory for webhook URLs: plain http:// only to a loopback host "
    f"(127.0.0.0/8, ::1, localhost), or with the emulator's {ALLOW_HTTP_SETTING}=true"
)


def https_problem(url: str, *, allow_http: bool) -> str | None:
    """Why ``url`` breaks the HTTPS rule, or None when it keeps it (or ``allow_http``)."""
    if allow_http or urlsplit(url).scheme.lower() != "http" or is_loopback(url):
        return None
    return f"{HTTPS_RULE}; {urlsplit(url).hostname} is not a loopback host"
