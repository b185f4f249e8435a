"""``prefctl token``: get, inspect and clear access tokens.

A cached ``token get`` is usually answered by ``prefctl.auth.fastpath`` before this module loads;
this is the full path (fetching, ``--force``, ``--json``, ``-v``, error messages).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import State, get_state
from prefctl.cli.app import new_group
from prefctl.errors import ConfigError, PrefctlError, UsageError

if TYPE_CHECKING:
    from prefctl.auth.provider import TokenProvider
    from prefctl.auth.token_info import TokenInfo
    from prefctl.config import Profile


def register(root: typer.Typer) -> None:
    group = new_group("token", "Get, inspect and clear OAuth access tokens.")
    group.command("get")(get_token)
    group.command("inspect")(inspect_token)
    group.command("clear")(clear_tokens)
    root.add_typer(group)


def _provider(profile: Profile, scope: str | None = None) -> TokenProvider:
    from prefctl.auth.provider import TokenProvider
    from prefctl.clock import SystemClock

    return TokenProvider.for_profile(profile, clock=SystemClock(), scope=scope)


def get_token(
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            help="Scope to ask for (default: <service_client_id>/<user_id> of the profile).",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Fetch a new token even if a cached one is fresh (which also checks the credentials).",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the whole token response as JSON (expires_in counted from now).",
        ),
    ] = False,
) -> None:
    """Print an access token (one line on stdout), from the cache while it has a minute left.

    Example: TOKEN=$(prefctl token get)
    """
    state = get_state()
    provider = _provider(state.profile(), scope)
    token = provider.token(force=force)
    if as_json or state.json:
        state.out.json(token.response(provider.cache.clock.now()))
    else:
        state.out.line(token.access_token)


def inspect_token(
    token: Annotated[
        str | None,
        typer.Argument(
            help="The token, or '-' to read it from stdin (default: the profile's current token).",
            show_default=False,
        ),
    ] = None,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Check signature, audience and expiry against the issuer's JWKS "
            "({iss}/oauth2/v1/keys).",
        ),
    ] = False,
) -> None:
    """Decode a token's header and claims and show its scope and time left (exit 1 if expired).

    Without --verify nothing is checked but the token's shape.
    """
    from prefctl.auth import token_info
    from prefctl.clock import SystemClock
    from prefctl.logs import register_secret

    state = get_state()
    text = _token_text(state, token)
    register_secret(text)
    now = SystemClock().now()
    info = token_info.decode(text)
    if verify:  # an expired token too: the error then says whether its signature is valid
        profile = _optional_profile(state)
        ca_bundle = profile.path(profile.ca_bundle) if profile and profile.ca_bundle else None
        info = token_info.verify(text, now=now, ca_bundle=ca_bundle)
    _render(state, info, now)
    if info.is_expired(now):
        left = info.seconds_left(now) or 0.0
        raise PrefctlError(
            f"the token expired {_duration(-left)} ago",
            hint="get a new one with 'prefctl token get'",
        )


def clear_tokens(
    all_profiles: Annotated[
        bool, typer.Option("--all", help="Drop every cached token, of every profile.")
    ] = False,
) -> None:
    """Drop the current profile's cached tokens (all scopes), or with --all every cached token."""
    from prefctl.auth.cache import TokenCache
    from prefctl.clock import SystemClock

    state = get_state()
    if all_profiles:
        removed = TokenCache.default(SystemClock()).clear()
    else:
        profile = state.profile(service_urls=False)
        profile.require("auth_url", "client_id")
        removed = TokenCache.default(SystemClock()).clear(profile.auth_url, profile.client_id)
    if state.json:
        state.out.json({"removed": removed})
    else:
        state.out.success(f"removed {removed} cached token{'' if removed == 1 else 's'}")


def _token_text(state: State, token: str | None) -> str:
    if token is None:
        return _provider(state.profile()).token().access_token
    text = state.out.read_stdin("the token") if token == "-" else token
    text = text.strip()
    if not text:
        raise UsageError(
            "no token given", hint="pass a token, '-' with the token on stdin, or none"
        )
    return text


def _optional_profile(state: State) -> Profile | None:
    # An explicit token can be inspected without any profile; the profile only adds its CA bundle.
    try:
        return state.profile()
    except ConfigError:
        return None


def _render(state: State, info: TokenInfo, now: datetime) -> None:
    left = info.seconds_left(now)
    claims = info.claims
    summary: dict[str, Any] = {
        "algorithm": info.header.get("alg"),
        "key id": info.header.get("kid"),
        "issuer": claims.get("iss"),
        "subject": claims.get("sub"),
        "audience": claims.get("aud"),
        "scope": info.scope,
        "service client id": claims.get("scid"),
        "user id": claims.get("uid"),
        "issued at": _iso(info.issued_at),
        "expires at": _iso(info.expires_at),
        "time left": _time_left(left),
        "token id": claims.get("jti"),
        "signature": "verified" if info.verified else "not checked (use --verify)",
    }
    known = {"iss", "sub", "aud", "scope", "scid", "uid", "iat", "exp", "jti"}
    summary.update({name: value for name, value in claims.items() if name not in known})
    state.out.record(
        {k: v for k, v in summary.items() if v is not None},
        json_data={
            "header": info.header,
            "claims": claims,
            "scope": info.scope,
            "issued_at": _iso(info.issued_at),
            "expires_at": _iso(info.expires_at),
            "seconds_left": None if left is None else int(left),
            "expired": info.is_expired(now),
            "verified": info.verified,
        },
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _time_left(left: float | None) -> str:
    if left is None:
        return "never expires (no exp claim)"
    if left <= 0:
        return f"expired {_duration(-left)} ago"
    return _duration(left)


def _duration(seconds: float) -> str:
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"
