"""Profile ``local``: how ``emulator start`` tells the rest of prefctl where its emulator is.

Every start rewrites the whole ``[profiles.local]`` table from the store's bootstrap credentials
and the URLs actually served (the emulator owns this profile; copy it under another name to
customise it). The client secret and the Hashkey are written inline, which ``profiles.toml`` allows
because prefctl writes it 0600. ``local`` becomes the default profile only when there is none.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefctl.config import ConfigFile, update_config

if TYPE_CHECKING:
    from cryptography import x509

PROFILE_NAME = "local"


@dataclass(frozen=True)
class LocalAccount:
    """The bootstrap account and the credentials that profile ``local`` holds."""

    service_client_id: str
    user_id: str
    client_id: str
    client_secret: str = field(repr=False)
    hashkey: str = field(repr=False)
    signature_user_id: str = ""
    environment: str = "Sandbox"


def write_local_profile(
    config_file: Path,
    *,
    auth_url: str,
    api_url: str,
    account: LocalAccount,
    ca_bundle: Path | None = None,
    client_ids: Collection[str] = (),
) -> None:
    """Create or refresh profile ``local`` in ``config_file``; point every other profile whose
    ``client_id`` is one of ``client_ids`` (this emulator's clients, such as the profiles of
    ``emulator accounts add``) at the same URLs and CA."""
    table = _profile_table(auth_url, api_url, account, ca_bundle)
    address: dict[str, Any] = {
        k: table[k] for k in ("auth_url", "api_url", "ca_bundle") if k in table
    }

    def write(cfg: ConfigFile) -> None:
        cfg.profiles[PROFILE_NAME] = table
        if not cfg.default:
            cfg.default = PROFILE_NAME
        for name, other in cfg.profiles.items():
            if name != PROFILE_NAME and other.get("client_id") in client_ids:
                other.pop("ca_bundle", None)
                other.update(address)

    update_config(config_file, write)


def _profile_table(
    auth_url: str, api_url: str, account: LocalAccount, ca_bundle: Path | str | None
) -> dict[str, Any]:
    table: dict[str, Any] = {
        "auth_url": auth_url,
        "api_url": api_url,
        "service_client_id": account.service_client_id,
        "user_id": account.user_id,
        "client_id": account.client_id,
        "auth_method": "client_secret_basic",
        "client_secret": account.client_secret,
        "environment": account.environment,
    }
    if ca_bundle is not None:
        table["ca_bundle"] = str(ca_bundle)
    table["webhooks"] = {
        "signature_user_id": account.signature_user_id,
        "hashkey": account.hashkey,
    }
    return table


# -- profiles of the emulator's other accounts ('emulator accounts add') ----------------------------
@dataclass(frozen=True)
class EmulatorAddress:
    """Where an emulator answers, as a profile needs it."""

    auth_url: str
    api_url: str
    ca_bundle: str | None = None


DEFAULT_ADDRESS = EmulatorAddress("http://127.0.0.1:8750", "http://127.0.0.1:8750/api/v1")


def emulator_address(data_dir: Path, config_file: Path, local_client_id: str) -> EmulatorAddress:
    """Where the emulator of ``data_dir`` answers: from its pid file while one runs (or ran),
    else from profile ``local`` when that emulator wrote it (its client id is the store's), else
    the default address of ``prefctl emulator start``."""
    from prefctl.config import load_config
    from prefctl.emulator.daemon import read_pid_file

    record = read_pid_file(data_dir)
    if record is not None:
        return EmulatorAddress(record.auth_url, record.api_url, record.ca_bundle)
    local = load_config(config_file).profiles.get(PROFILE_NAME, {})
    if local.get("client_id") == local_client_id and local.get("auth_url") and local.get("api_url"):
        return EmulatorAddress(local["auth_url"], local["api_url"], local.get("ca_bundle"))
    return DEFAULT_ADDRESS


def check_account_profile_free(config_file: Path, name: str, *, replace: bool) -> None:
    """ConfigError unless profile ``name`` can be written for an account (valid, not ``local``,
    absent or ``replace``)."""
    from prefctl.config import load_config
    from prefctl.errors import ConfigError

    if name == PROFILE_NAME:
        raise ConfigError(
            f"profile '{PROFILE_NAME}' belongs to the emulator's default account",
            hint="choose another account name",
        )
    load_config(config_file).check_new_profile(name, replace=replace)


def write_account_profile(
    config_file: Path, name: str, *, address: EmulatorAddress, account: LocalAccount
) -> None:
    """Create (or replace) profile ``name`` for one of the emulator's accounts; the secret and
    Hashkey are inline, as in profile ``local`` (prefctl writes the file 0600)."""
    table = _profile_table(address.auth_url, address.api_url, account, address.ca_bundle)

    def write(cfg: ConfigFile) -> None:
        cfg.profiles[name] = table  # never the default: 'prefctl -p NAME' picks it

    update_config(config_file, write)


def replace_client_secret(config_file: Path, client_id: str, client_secret: str) -> list[str]:
    """After a rotation: write ``client_secret`` into every profile of ``config_file`` that holds
    the secret of ``client_id`` inline; returns their names. The file is left untouched when none
    does (a secret read from a variable or a file is the user's to change)."""
    from prefctl.config import load_config

    def holders(cfg: ConfigFile) -> list[str]:
        return [
            name
            for name, table in cfg.profiles.items()
            if table.get("client_id") == client_id and isinstance(table.get("client_secret"), str)
        ]

    if not config_file.exists() or not holders(load_config(config_file)):
        return []

    def write(cfg: ConfigFile) -> list[str]:
        names = holders(cfg)
        for name in names:
            cfg.profiles[name]["client_secret"] = client_secret
        return names

    return update_config(config_file, write)[1]


def remove_account_profile(config_file: Path, name: str, service_client_id: str) -> bool:
    """Remove profile ``name`` when it is one of account ``service_client_id``'s (a profile of
    that name for anything else stays); returns whether one was removed."""

    def remove(cfg: ConfigFile) -> bool:
        table = cfg.profiles.get(name)
        if table is None or table.get("service_client_id") != service_client_id:
            return False
        cfg.remove_profile(name)
        return True

    if not config_file.exists():
        return False
    return update_config(config_file, remove)[1]


def ca_bundle_for(certificate_file: Path) -> Path | None:
    """The CA file a client needs to trust the emulator's TLS certificate, when we can tell.

    The certificate file itself when its first certificate is self-signed; otherwise the first of
    ``ca.pem`` beside it and the development CA (``prefctl certs init``) that issued it. None when
    the issuer is not found (a certificate from a CA the system already trusts).
    """
    from cryptography import x509

    from prefctl.certs import CA_CERT_FILE, default_certs_dir

    try:
        leaf = x509.load_pem_x509_certificates(certificate_file.read_bytes())[0]
    except (OSError, ValueError, IndexError):
        return None
    if _issued_by(leaf, leaf):
        return certificate_file.absolute()
    for candidate in (certificate_file.parent / CA_CERT_FILE, default_certs_dir() / CA_CERT_FILE):
        try:
            issuers = x509.load_pem_x509_certificates(candidate.read_bytes())
        except (OSError, ValueError):
            continue
        if any(_issued_by(leaf, issuer) for issuer in issuers):
            return candidate.absolute()
    return None


def _issued_by(leaf: x509.Certificate, issuer: x509.Certificate) -> bool:
    from cryptography.exceptions import InvalidSignature

    if leaf.issuer != issuer.subject:
        return False
    try:
        leaf.verify_directly_issued_by(issuer)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True
