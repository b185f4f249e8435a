"""The options that choose signing credentials, shared by every command that signs or verifies.

``events sign``, ``events verify``, ``endpoint check`` and ``receive`` take the same flags; the values are
resolved by ``prefctl.webhooks.credentials`` (flags > environment > profile). There is no flag for
the Hashkey itself: it would end up in shell history and in ``ps``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from prefctl.cli._context import get_state

if TYPE_CHECKING:
    from prefctl.webhooks.signature import SigningCredentials

ClientIdOption = Annotated[
    str | None,
    typer.Option(
        "--client-id",
        help="ClientId in the signature: the service client id "
        "(default: the profile's service_client_id; env: PREFCTL_SERVICE_CLIENT_ID).",
        show_default=False,
    ),
]
SignatureUserIdOption = Annotated[
    str | None,
    typer.Option(
        "--signature-user-id",
        help="EventsClientSignatureUserId (default: signature_user_id in the profile's "
        "webhooks table; env: PREFCTL_SIGNATURE_USER_ID).",
        show_default=False,
    ),
]
HashkeyFileOption = Annotated[
    str | None,
    typer.Option(
        "--hashkey-file",
        metavar="FILE",
        help="Read the Hashkey from the first line of FILE (default: the profile's hashkey_file).",
        show_default=False,
    ),
]
HashkeyEnvOption = Annotated[
    str | None,
    typer.Option(
        "--hashkey-env",
        metavar="NAME",
        help="Read the Hashkey from the environment variable NAME "
        "(default: the profile's hashkey_env, PREFCTL_HASHKEY).",
        show_default=False,
    ),
]

SignatureEncodingOption = Annotated[
    str | None,
    typer.Option(
        "--signature-encoding",
        metavar="raw|hex",
        help="What the Signature is the Base64 of: raw (the HMAC-SHA512 digest's bytes) or hex "
        "(its hex text) (default: signature_encoding in the profile's webhooks table, raw; "
        "env: PREFCTL_SIGNATURE_ENCODING).",
        show_default=False,
    ),
]


def signing_credentials(
    client_id: str | None,
    signature_user_id: str | None,
    hashkey_file: str | None,
    hashkey_env: str | None,
    signature_encoding: str | None = None,
) -> SigningCredentials:
    """The credentials of the selected profile with these flags applied."""
    from prefctl.webhooks.credentials import load_signing_credentials

    state = get_state()
    return load_signing_credentials(
        state.config(),
        state.profile_name,
        client_id=client_id,
        signature_user_id=signature_user_id,
        hashkey_file=hashkey_file,
        hashkey_env=hashkey_env,
        signature_encoding=signature_encoding,
    )
