"""The token endpoint's wire shapes (docs/authentication.md): the token response and the RFC 6749 error.

Keys are snake_case as OAuth 2.0 defines them, not PascalCase. Unknown members are ignored so that a
service adding one (``refresh_token``, ``id_token``) does not break the client.

    >>> TokenResponse.model_validate({"access_token": "eyJ…", "token_type": "Bearer",
    ...                                "scope": "ACME/admin", "expires_in": 3600}).expires_in
    3600
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TokenError", "TokenResponse"]


class TokenResponse(BaseModel):
    """A successful token response: ``{access_token, token_type, scope, expires_in}``."""

    model_config = ConfigDict(extra="ignore")

    access_token: str = Field(min_length=1, repr=False)
    token_type: str
    scope: str = ""
    expires_in: int = Field(gt=0)


class TokenError(BaseModel):
    """An RFC 6749 §5.2 error body: ``{error, error_description?, error_uri?}``."""

    model_config = ConfigDict(extra="ignore")

    error: str
    error_description: str | None = None
    error_uri: str | None = None
