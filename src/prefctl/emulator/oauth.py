"""The emulator's token service (docs/authentication.md): token endpoint, JWKS, metadata, bearer checks.

``POST /oauth2/v1/token`` takes a form-encoded client-credentials request. The client proves who it
is with an ``Authorization: Basic`` header, ``client_id`` + ``client_secret`` in the body, or an
RFC 7523 client assertion (see ``prefctl.emulator.assertion``). The scope
``<service_client_id>/<user_id>`` must name the client's own account and an active user of it.
Errors are RFC 6749 §5.2 JSON ``{error, error_description}``; malformed input of any kind gets one
of them, never a 5xx.

Access tokens are RS256 JWTs with ``kid`` in the header and the claims ``iss`` (auth_url), ``sub``
(client_id), ``aud`` (``prefctl-api``), ``scope``, ``scid``, ``uid``, ``iat``, ``exp`` and ``jti``.
REST routes call ``authenticate_bearer(ctx, one_authorization(values))`` with the values of every
Authorization header (two are refused): it returns the ``Principal`` the token speaks for, or
raises ``InvalidTokenError`` (expired, tampered, revoked, foreign issuer, user gone).
"""

from __future__ import annotations

import base64
import binascii
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote_plus

import jwt
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from prefctl.auth.credentials import ASSERTION_TYPE
from prefctl.emulator.assertion import AssertionRejected, verify_client_assertion
from prefctl.emulator.context import EmulatorContext
from prefctl.emulator.keys import ALGORITHM, KeyRing, VerifiedTokens
from prefctl.errors import AuthError
from prefctl.store import Store, accounts, tokens
from prefctl.store.db import transaction
from prefctl.store.timestamps import epoch

log = logging.getLogger(__name__)

TOKEN_PATH = "/oauth2/v1/token"
KEYS_PATH = "/oauth2/v1/keys"
METADATA_PATH = "/.well-known/oauth-authorization-server"
AUDIENCE = "prefctl-api"
GRANT_TYPE = "client_credentials"
MAX_FORM_BYTES = 16 * 1024
_MAX_FORM_FIELDS = 32
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_BASIC_CHALLENGE = 'Basic realm="prefctl-emulator", charset="UTF-8"'
# A fixed salt and digest so that an unknown client costs the same hash as a known one.
_DUMMY_CLIENT = accounts.OAuthClient(
    client_id="", service_client_id="", created_at=0.0, secret_salt="00" * 16, secret_hash="0" * 64
)


class TokenError(Exception):
    """An RFC 6749 §5.2 error answer of the token endpoint."""

    def __init__(
        self, error: str, description: str, *, status: int = 400, basic: bool = False
    ) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status
        self.basic = basic


class InvalidTokenError(AuthError):
    """A bearer token that does not authenticate (RFC 6750 ``invalid_token``)."""

    error = "invalid_token"


class RepeatedAuthorizationError(InvalidTokenError):
    """A request with more than one Authorization header (401 everywhere, never one picked)."""

    error = "invalid_request"


def one_authorization(values: Sequence[str]) -> str | None:
    """The value of a request's only Authorization header (None without one).

    Two or more are refused (``RepeatedAuthorizationError``) by the token endpoint and the REST API
    alike, rather than one of them chosen: proxies and frameworks disagree on which one counts, so
    a request that carries two means different things to each of them.
    """
    if len(values) > 1:
        raise RepeatedAuthorizationError(
            f"the request has {len(values)} Authorization headers: send exactly one"
        )
    return values[0] if values else None


@dataclass(frozen=True)
class Principal:
    """Whom a valid access token speaks for, and what that user may do."""

    client_id: str
    service_client_id: str
    user_id: str
    scope: str
    jti: str
    issued_at: int
    expires_at: int
    permissions: frozenset[str]

    def allows(self, permission: str) -> bool:
        return permission in self.permissions


def key_ring(ctx: EmulatorContext) -> KeyRing:
    """The context's signing keys (created in the store on first use)."""
    ring = ctx.key_ring
    if ring is None:
        with ctx.lock:
            if ctx.key_ring is None:
                ctx.key_ring = KeyRing.load(ctx.connection(), ctx.clock)
            ring = ctx.key_ring
    return ring


# -- the token request -----------------------------------------------------------------------------
def parse_form(content_type: str | None, body: bytes) -> dict[str, str]:
    """The fields of a form-encoded token request; TokenError for anything malformed."""
    media_type, _, params = (content_type or "").partition(";")
    if media_type.strip().lower() != "application/x-www-form-urlencoded":
        raise TokenError(
            "invalid_request", "Content-Type must be application/x-www-form-urlencoded"
        )
    charset = params.strip().lower()
    if charset and charset.replace(" ", "") not in ("charset=utf-8", 'charset="utf-8"'):
        raise TokenError("invalid_request", "the form must be encoded in UTF-8")
    if len(body) > MAX_FORM_BYTES:
        raise TokenError("invalid_request", f"the form is larger than {MAX_FORM_BYTES} bytes")
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            errors="strict",
            max_num_fields=_MAX_FORM_FIELDS,
        )
    except ValueError:
        raise TokenError("invalid_request", "the form body is malformed") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise TokenError("invalid_request", f"parameter {_shown(name)} is repeated")
        form[name] = value
    return form


def issue_token(
    ctx: EmulatorContext,
    form: Mapping[str, str],
    authorization: str | None,
    *,
    audiences: Sequence[str],
) -> dict[str, Any]:
    """Authenticate the client, check the grant and scope, and mint an access token.

    ``audiences`` are the URLs a client assertion may name as ``aud`` (the token endpoint).
    """
    for required in ("grant_type", "scope"):
        if not form.get(required):
            raise TokenError("invalid_request", f"{required} is required")
    conn = ctx.connection()
    client = _authenticate_client(ctx, form, authorization, audiences)
    if form["grant_type"] != GRANT_TYPE:
        raise TokenError("unsupported_grant_type", f"only {GRANT_TYPE} is supported")
    scope = form["scope"]
    service_client_id, slash, user_id = scope.partition("/")
    if not slash or not service_client_id or not user_id or "/" in user_id:
        raise TokenError("invalid_scope", "scope must be <service_client_id>/<user_id>")
    if service_client_id != client.service_client_id:
        raise TokenError(
            "unauthorized_client", "the client is not registered for the account in scope"
        )
    if accounts.get_account(conn, service_client_id) is None:
        raise TokenError("invalid_scope", "the account in scope does not exist")
    user = accounts.get_user(conn, service_client_id, user_id)
    if user is None or not user.is_active:
        raise TokenError("invalid_scope", "the user in scope does not exist or is not active")
    return _mint(ctx, client, scope, user)


def _authenticate_client(
    ctx: EmulatorContext,
    form: Mapping[str, str],
    authorization: str | None,
    audiences: Sequence[str],
) -> accounts.OAuthClient:
    uses_basic = authorization is not None
    uses_secret = "client_secret" in form
    uses_assertion = "client_assertion" in form or "client_assertion_type" in form
    if uses_basic + uses_secret + uses_assertion > 1:
        raise TokenError("invalid_request", "use exactly one client authentication method")
    conn = ctx.connection()
    if authorization is not None:
        client_id, secret = _basic_credentials(authorization)
        if "client_id" in form and form["client_id"] != client_id:
            raise TokenError("invalid_request", "client_id differs from the Basic credentials")
        return _client_with_secret(conn, client_id, secret, basic=True, now=epoch(ctx.clock.now()))
    if uses_assertion:
        assertion_type = form.get("client_assertion_type")
        assertion = form.get("client_assertion")
        if not assertion_type or not assertion:
            raise TokenError(
                "invalid_request", "client_assertion and client_assertion_type go together"
            )
        if assertion_type != ASSERTION_TYPE:
            raise TokenError(
                "invalid_client", f"client_assertion_type must be {ASSERTION_TYPE}", status=401
            )
        try:
            return verify_client_assertion(
                conn,
                assertion,
                client_id=form.get("client_id"),
                audiences=audiences,
                now=ctx.clock.now(),
            )
        except AssertionRejected as exc:
            raise TokenError("invalid_client", str(exc), status=401) from None
    if uses_secret:
        if not form.get("client_id"):
            raise TokenError("invalid_request", "client_id is required with client_secret")
        return _client_with_secret(
            conn, form["client_id"], form["client_secret"], basic=False, now=epoch(ctx.clock.now())
        )
    raise TokenError("invalid_client", "client authentication is required", status=401)


def _basic_credentials(authorization: str) -> tuple[str, str]:
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        raise TokenError(
            "invalid_client", "only Basic authentication is accepted", status=401, basic=True
        )
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        decoded = ""
    client_id, colon, secret = decoded.partition(":")
    if not colon or not client_id:
        raise TokenError(
            "invalid_client", "the Basic credentials are malformed", status=401, basic=True
        )
    # RFC 6749 §2.3.1: both parts are form-urlencoded before base64.
    return unquote_plus(client_id), unquote_plus(secret)


def _client_with_secret(
    conn: Store, client_id: str, secret: str, *, basic: bool, now: float
) -> accounts.OAuthClient:
    """The client whose secret (or, during a rotation's overlap, whose previous one) this is."""
    client = accounts.get_client(conn, client_id)
    if accounts.secret_matches(client or _DUMMY_CLIENT, secret, now=now) and client is not None:
        return client
    raise TokenError("invalid_client", "client authentication failed", status=401, basic=basic)


def _mint(
    ctx: EmulatorContext, client: accounts.OAuthClient, scope: str, user: accounts.User
) -> dict[str, Any]:
    ring = key_ring(ctx)
    issued_at = int(ctx.clock.now().timestamp())
    expires_at = issued_at + client.token_lifetime_minutes * 60
    jti = uuid.uuid4().hex
    claims = {
        "iss": ctx.auth_url,
        "sub": client.client_id,
        "aud": AUDIENCE,
        "scope": scope,
        "scid": user.service_client_id,
        "uid": user.user_id,
        "iat": issued_at,
        "exp": expires_at,
        "jti": jti,
    }
    signer = ring.signer
    access_token = jwt.encode(
        claims, signer.private_key, algorithm=ALGORITHM, headers={"kid": signer.kid}
    )
    conn = ctx.connection()
    with transaction(conn):
        tokens.record_issued_token(
            conn,
            tokens.IssuedToken(jti, client.client_id, scope, issued_at, expires_at),
            now=issued_at,
        )
    log.info("issued token jti=%s to client %s for scope %s", jti, client.client_id, scope)
    return {
        "access_token": access_token,
        "token_type": "Bearer",
        "scope": scope,
        "expires_in": expires_at - issued_at,
    }


def _shown(name: str) -> str:
    """A request parameter name, safe to echo in a description."""
    printable = "".join(c for c in name if c.isprintable())[:40]
    return repr(printable)


# -- bearer tokens on the REST API -----------------------------------------------------------------
def authenticate_bearer(ctx: EmulatorContext, authorization: str | None) -> Principal:
    """The principal of an ``Authorization: Bearer <token>`` header value.

    Raises ``InvalidTokenError`` (exit code 3 if it ever reaches the CLI) when the header is missing
    or not Bearer, or the token is malformed, signed by an unknown key, tampered with, expired,
    revoked, issued by another issuer or for another audience, or its user is gone or inactive.
    It reads the store (one query of four primary-key lookups once the token's signature is
    cached; the REST API calls it on the event loop, see ``routes._common.require``).
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise InvalidTokenError("a Bearer access token is required")
    return verify_access_token(ctx, token.strip())


def verify_access_token(ctx: EmulatorContext, token: str) -> Principal:
    """The principal ``token`` speaks for; InvalidTokenError when it does not authenticate."""
    claims = _signed_claims(ctx, token)
    _check_claims(claims)
    if int(ctx.clock.now().timestamp()) >= claims["exp"]:
        raise InvalidTokenError("the access token has expired")
    standing = tokens.token_standing(
        ctx.connection(),
        jti=claims["jti"],
        client_id=claims["sub"],
        service_client_id=claims["scid"],
        user_id=claims["uid"],
    )
    if standing.revoked:
        raise InvalidTokenError("the access token has been revoked")
    if not standing.user_active or not standing.client_exists:
        raise InvalidTokenError("the access token's client or user no longer exists or is inactive")
    return Principal(
        client_id=claims["sub"],
        service_client_id=claims["scid"],
        user_id=claims["uid"],
        scope=claims["scope"],
        jti=claims["jti"],
        issued_at=claims["iat"],
        expires_at=claims["exp"],
        permissions=standing.permissions,
    )


def verified_tokens(ctx: EmulatorContext) -> VerifiedTokens:
    """The context's cache of verified token signatures (made on first use)."""
    cache = ctx.verified_tokens
    if cache is None:
        with ctx.lock:
            if ctx.verified_tokens is None:
                ctx.verified_tokens = VerifiedTokens()
            cache = ctx.verified_tokens
    return cache


def _signed_claims(ctx: EmulatorContext, token: str) -> dict[str, Any]:
    """The claims of ``token`` once its signature, issuer and audience verify."""
    cache = verified_tokens(ctx)
    cached = cache.get(token)
    if cached is not None:
        return cached
    claims = _decode_signed(ctx, token)
    cache.put(token, claims)
    return claims


def _decode_signed(ctx: EmulatorContext, token: str) -> dict[str, Any]:
    try:
        header = jwt.get_unverified_header(token)
    except (jwt.PyJWTError, ValueError, TypeError):
        raise InvalidTokenError("the access token is malformed") from None
    kid = header.get("kid")
    key = key_ring(ctx).public_key(kid) if isinstance(kid, str) else None
    if key is None or header.get("alg") != ALGORITHM:
        raise InvalidTokenError("the access token was not signed by this emulator")
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[ALGORITHM],
            audience=AUDIENCE,
            issuer=ctx.auth_url,
            options={
                "require": ["iss", "sub", "aud", "scope", "scid", "uid", "iat", "exp", "jti"],
                "verify_exp": False,  # checked below against the emulator's clock
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.InvalidIssuerError:
        raise InvalidTokenError("the access token was issued by another issuer") from None
    except jwt.InvalidAudienceError:
        raise InvalidTokenError(f"the access token is not meant for {AUDIENCE}") from None
    except (jwt.PyJWTError, ValueError, TypeError):
        raise InvalidTokenError("the access token does not verify") from None
    return claims


def _check_claims(claims: Mapping[str, Any]) -> None:
    strings = ("sub", "scope", "scid", "uid", "jti")
    numbers = ("iat", "exp")
    if not all(isinstance(claims[name], str) for name in strings) or not all(
        isinstance(claims[name], int) and not isinstance(claims[name], bool) for name in numbers
    ):
        raise InvalidTokenError("the access token's claims are malformed")
    if claims["scope"] != f"{claims['scid']}/{claims['uid']}":
        raise InvalidTokenError("the access token's scope does not match scid and uid")


# -- routes ----------------------------------------------------------------------------------------
def metadata(ctx: EmulatorContext) -> dict[str, Any]:
    """RFC 8414 authorization server metadata."""
    return {
        "issuer": ctx.auth_url,
        "token_endpoint": ctx.token_url,
        "jwks_uri": ctx.auth_url + KEYS_PATH,
        "grant_types_supported": [GRANT_TYPE],
        "response_types_supported": [],
        "token_endpoint_auth_methods_supported": [
            "client_secret_basic",
            "client_secret_post",
            "private_key_jwt",
        ],
        "token_endpoint_auth_signing_alg_values_supported": ["RS256", "PS256", "ES256"],
    }


def register(app: FastAPI, ctx: EmulatorContext) -> None:
    """Add the token endpoint, the JWKS and the metadata document to ``app``."""

    @app.post(TOKEN_PATH, summary="Token endpoint (client credentials)", tags=["oauth2"])
    async def token(request: Request) -> JSONResponse:
        try:
            try:
                authorization = one_authorization(request.headers.getlist("authorization"))
            except RepeatedAuthorizationError as exc:
                raise TokenError("invalid_client", exc.message, status=401, basic=True) from None
            body = await _read_body(request)
            form = parse_form(request.headers.get("content-type"), body)
            answer = await run_in_threadpool(
                issue_token,
                ctx,
                form,
                authorization,
                audiences=_audiences(ctx, request),
            )
        except TokenError as exc:
            log.info("token request refused: %s (%s)", exc.error, exc.description)
            return _error_response(exc)
        return JSONResponse(answer, headers=_NO_STORE)

    @app.get(KEYS_PATH, summary="JSON Web Key Set", tags=["oauth2"])
    async def keys() -> JSONResponse:
        ring = await run_in_threadpool(key_ring, ctx)
        return JSONResponse(ring.jwks(), headers={"Cache-Control": "public, max-age=300"})

    @app.get(METADATA_PATH, summary="Authorization server metadata", tags=["oauth2"])
    async def server_metadata() -> JSONResponse:
        return JSONResponse(metadata(ctx))


def _error_response(exc: TokenError) -> JSONResponse:
    headers = dict(_NO_STORE)
    if exc.basic:
        headers["WWW-Authenticate"] = _BASIC_CHALLENGE
    return JSONResponse(
        {"error": exc.error, "error_description": exc.description},
        status_code=exc.status,
        headers=headers,
    )


async def _read_body(request: Request) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > MAX_FORM_BYTES:
            raise TokenError("invalid_request", f"the form is larger than {MAX_FORM_BYTES} bytes")
    return bytes(body)


def _audiences(ctx: EmulatorContext, request: Request) -> list[str]:
    # The configured token URL, and the URL as this request reached it (localhost vs 127.0.0.1).
    # Built by hand: parsing an arbitrary Host header could fail, and this must never 5xx.
    host = request.headers.get("host")
    audiences = [ctx.token_url]
    if host:
        audiences.append(f"{request.scope.get('scheme', 'http')}://{host}{TOKEN_PATH}")
    return list(dict.fromkeys(audiences))
