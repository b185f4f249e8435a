"""Client authentication: credentials, the token client, the token cache and ``httpx`` auth.

    credentials.py   the three auth_methods → what a token request carries
    token_client.py  POST {auth_url}/oauth2/v1/token and its errors
    cache.py         one 0600 file per (auth_url, client_id, scope); renewal under 60 s left
    provider.py      TokenProvider: the cache first, the token client when needed
    httpx_auth.py    BearerAuth: the token on every REST request, one renewal on 401
    token_info.py    decode a token; verify it against the issuer's JWKS
    fastpath.py      a cached ``token get`` served before the CLI loads
    tls.py           verifying SSL contexts with the profile's extra CA
    http_policy.py   what the HTTP clients share: retries of 429/503, proxies, one-line server text

This package imports nothing itself: the fast path of ``prefctl token get`` imports ``cache`` alone
and must not pay for httpx or pydantic. Import the submodule you need.
"""
