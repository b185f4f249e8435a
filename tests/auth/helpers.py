"""Helpers of the auth tests: a profile in the test's own profiles.toml."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefctl.config import ConfigFile, save_config

CLIENT_ID = "c" * 48
CLIENT_SECRET = "s3cret-" + "x" * 57
SCOPE = "DEMO/admin"


def write_profile(auth_url: str, *, name: str = "local", **keys: Any) -> Path:
    """Write profile ``name`` (the default) pointing at ``auth_url`` into PREFCTL_CONFIG."""
    path = Path(os.environ["PREFCTL_CONFIG"])
    table = {
        "auth_url": auth_url,
        "api_url": f"{auth_url}/api/v1",
        "service_client_id": "DEMO",
        "user_id": "admin",
        "client_id": CLIENT_ID,
        **{k: str(v) for k, v in keys.items()},
    }
    save_config(ConfigFile(path=path, default=name, profiles={name: table}))
    return path
