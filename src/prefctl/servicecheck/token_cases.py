"""The token endpoint's cases: a token with the Basic header and with the credentials in the
body, ``expires_in`` against the JWT's lifetime, and the OAuth error shape of a wrong secret and
of a wrong scope (RFC 6749 5.1 and 5.2)."""

from __future__ import annotations

from typing import Any

import httpx

from prefctl.auth.credentials import SecretBasic, SecretPost, credentials_for
from prefctl.logs import register_secret
from prefctl.servicecheck.evidence import is_int, jwt_claims
from prefctl.servicecheck.session import Case, Differs, Session, Skipped


def _secret(session: Session) -> str:
    if session.profile.auth_method == "certificate":
        raise Skipped("the profile authenticates with a certificate: no secret to send")
    secret = session.profile.resolve_client_secret()
    register_secret(secret)
    return secret


def _form(session: Session) -> dict[str, str]:
    return {"grant_type": "client_credentials", "scope": session.profile.scope}


def token_basic(session: Session) -> str:
    parts = SecretBasic(session.profile.client_id, _secret(session)).token_request(
        session.token_url, session.clock.now()
    )
    response, body = session.token_request(
        _form(session), parts.headers, "Authorization: Basic ***; grant_type, scope"
    )
    return _token_answer(session, response, body, "with the Basic header")


def token_body(session: Session) -> str:
    parts = SecretPost(session.profile.client_id, _secret(session)).token_request(
        session.token_url, session.clock.now()
    )
    form = {**_form(session), **parts.form}
    response, body = session.token_request(
        form, {}, "grant_type, scope, client_id, client_secret=***"
    )
    return _token_answer(session, response, body, "with client_id and client_secret in the body")


def _token_answer(session: Session, response: httpx.Response, body: Any, how: str) -> str:
    session.expect(
        "HTTP 200, JSON {access_token, token_type: Bearer, scope: <the scope asked for>, "
        "expires_in: integer}, Cache-Control: no-store"
    )
    if response.status_code != 200 or not isinstance(body, dict):
        raise Differs(f"a token request {how} was refused (HTTP {response.status_code})")
    scope = session.profile.scope
    problems = []
    if not isinstance(body.get("access_token"), str):
        problems.append("no access_token")
    if body.get("token_type") != "Bearer":
        problems.append(f"token_type is {body.get('token_type')!r}, not 'Bearer'")
    if body.get("scope") != scope:
        problems.append(f"scope is {body.get('scope')!r}, not {scope!r}")
    if not is_int(body.get("expires_in")):
        problems.append(f"expires_in is {body.get('expires_in')!r}, not an integer")
    if "no-store" not in response.headers.get("cache-control", ""):
        problems.append("no Cache-Control: no-store (RFC 6749 5.1)")
    if problems:
        raise Differs(f"token response {how}: " + "; ".join(problems))
    return f"a token {how}: access_token, token_type Bearer, scope, expires_in"


def token_expires_in(session: Session) -> str:
    profile = session.profile
    parts = credentials_for(profile).token_request(session.token_url, session.clock.now())
    response, body = session.token_request(
        {**_form(session), **parts.form},
        parts.headers,
        f"the profile's {profile.auth_method}",
    )
    session.expect(
        "expires_in: an integer of seconds, equal to the token's exp - iat (60 minutes by "
        "default; configurable per client)"
    )
    if response.status_code != 200 or not isinstance(body, dict):
        raise Differs(f"the token request was refused (HTTP {response.status_code})")
    expires_in = body.get("expires_in")
    if not isinstance(expires_in, int) or isinstance(expires_in, bool) or expires_in <= 0:
        raise Differs(f"expires_in is {expires_in!r}, not a positive integer")
    session.figures["expires_in"] = expires_in
    claims = jwt_claims(body.get("access_token"))
    if claims is None:
        raise Differs("the access_token is not a JWT: the spec says a JWT")
    lifetime = claims.get("exp", 0) - claims.get("iat", 0)
    session.figures["token_lifetime"] = lifetime
    if not is_int(lifetime) or abs(lifetime - expires_in) > 5:
        raise Differs(f"expires_in {expires_in} s, but the JWT's exp - iat is {lifetime} s")
    default = " (the default 60 minutes)" if expires_in == 3600 else ""
    return f"expires_in {expires_in} s{default}, as the JWT's exp - iat"


def token_wrong_secret(session: Session) -> str:
    secret = _secret(session)
    wrong = secret[::-1] if secret[::-1] != secret else secret + "x"
    parts = SecretBasic(session.profile.client_id, wrong).token_request(
        session.token_url, session.clock.now()
    )
    response, body = session.token_request(
        _form(session), parts.headers, "Authorization: Basic <a wrong secret>"
    )
    session.expect(
        "HTTP 401, JSON {error: invalid_client, error_description}, WWW-Authenticate: Basic "
        "(RFC 6749 5.2)"
    )
    return _oauth_error(response, body, 401, "invalid_client", basic=True)


def token_wrong_scope(session: Session) -> str:
    profile = session.profile
    parts = credentials_for(profile).token_request(session.token_url, session.clock.now())
    scope = f"{profile.service_client_id}/{session.config.name}-no-such-user"
    form = {"grant_type": "client_credentials", "scope": scope, **parts.form}
    response, body = session.token_request(form, parts.headers, f"scope {scope} (no such user)")
    session.expect("HTTP 400, JSON {error: invalid_scope, error_description} (RFC 6749 5.2)")
    return _oauth_error(response, body, 400, "invalid_scope", basic=False)


def _oauth_error(
    response: httpx.Response, body: Any, status: int, error: str, *, basic: bool
) -> str:
    problems = []
    if response.status_code != status:
        problems.append(f"HTTP {response.status_code}, not {status}")
    if not isinstance(body, dict):
        problems.append("the body is not a JSON object")
    else:
        if body.get("error") != error:
            problems.append(f"error is {body.get('error')!r}, not {error!r}")
        if not isinstance(body.get("error_description"), str):
            problems.append("no error_description")
    if basic and not response.headers.get("www-authenticate", "").lower().startswith("basic"):
        problems.append("no WWW-Authenticate: Basic header")
    if problems:
        raise Differs("; ".join(problems))
    return f"HTTP {status} {error} with error_description"


TOKEN_CASES: dict[str, Case] = {
    "token_basic": token_basic,
    "token_body": token_body,
    "token_expires_in": token_expires_in,
    "token_wrong_secret": token_wrong_secret,
    "token_wrong_scope": token_wrong_scope,
}
