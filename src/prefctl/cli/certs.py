"""``prefctl certs``: a development CA and the server and client certificates it signs."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prefctl.cli._context import State, get_state
from prefctl.cli.app import new_group
from prefctl.config import ENV_DATA_DIR
from prefctl.errors import UsageError

if TYPE_CHECKING:
    from prefctl.certs import IssuedCertificate


class KeyTypeChoice(StrEnum):
    ec = "ec"
    rsa = "rsa"


DirOption = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        help=f"Folder of the CA and certificates (default: <{ENV_DATA_DIR} or the user data "
        "dir>/certs).",
        show_default=False,
        file_okay=False,
    ),
]
KeyTypeOption = Annotated[
    KeyTypeChoice,
    typer.Option("--key-type", help="Key algorithm: ec (P-256, ES256) or rsa (2048, RS256)."),
]


def register(root: typer.Typer) -> None:
    group = new_group("certs", "Development CA, server and client certificates for TLS and mTLS.")
    group.command("init")(init_ca)
    group.command("issue")(issue)
    root.add_typer(group)


def _directory(directory: Path | None) -> Path:
    from prefctl.certs import default_certs_dir

    return directory.expanduser() if directory else default_certs_dir()


def init_ca(
    directory: DirOption = None,
    key_type: KeyTypeOption = KeyTypeChoice.ec,
) -> None:
    """Create the development CA (ca.pem, ca.key); an existing CA is kept, never replaced."""
    from prefctl import certs

    issued = certs.init_ca(_directory(directory), key_type=key_type.value)
    state = get_state()
    _show(state, issued)
    if issued.created:
        state.out.success(f"created the development CA in {issued.certificate.parent}")
    else:
        state.out.info(f"kept the existing development CA in {issued.certificate.parent}")


def issue(
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            metavar="HOST",
            help="Issue a TLS server certificate for HOST (DNS name or IP address).",
            show_default=False,
        ),
    ] = None,
    client: Annotated[
        str | None,
        typer.Option(
            "--client",
            metavar="NAME",
            help="Issue a client certificate (clientAuth) with common name NAME.",
            show_default=False,
        ),
    ] = None,
    directory: DirOption = None,
    key_type: KeyTypeOption = KeyTypeChoice.ec,
) -> None:
    """Issue a server or client certificate signed by the development CA."""
    from prefctl import certs

    if (server is None) == (client is None):
        raise UsageError("give exactly one of --server HOST or --client NAME")
    folder = _directory(directory)
    if server is not None:
        issued = certs.issue_server(folder, server, key_type=key_type.value)
    else:
        issued = certs.issue_client(folder, str(client), key_type=key_type.value)
    state = get_state()
    _show(state, issued)
    state.out.success(f"issued a {issued.kind} certificate for {issued.name}")
    if issued.kind == "client":
        state.out.info(
            "register it with: prefctl emulator clients add --certificate "
            f"{issued.certificate}, then set auth_method = certificate, "
            f"certificate = {issued.certificate} and private_key = {issued.private_key}"
        )


def _show(state: State, issued: IssuedCertificate) -> None:
    state.out.record(
        {
            "certificate": str(issued.certificate),
            "private key": str(issued.private_key),
            "CA certificate": str(issued.ca_certificate),
            "valid until": issued.not_after.isoformat(),
            "SHA-256 (x5t#S256)": issued.sha256,
        },
        json_data=issued.as_dict(),
    )
