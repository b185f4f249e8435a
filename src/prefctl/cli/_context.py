"""Global options and the per-invocation state every command reads."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prefctl.cli._output import Output

if TYPE_CHECKING:
    import typer

    from prefctl.config import ConfigFile, Profile


@dataclass
class State:
    """What the root callback parsed, plus the configuration loaded on first use."""

    profile_name: str | None = None
    config_flag: str | None = None
    output_format: str = "table"
    verbosity: int = 0
    quiet: bool = False
    no_color: bool = False
    out: Output = field(default_factory=Output)
    _config: ConfigFile | None = None

    @property
    def json(self) -> bool:
        return self.output_format == "json"

    def config(self) -> ConfigFile:
        """profiles.toml, loaded once; its warnings are shown once."""
        if self._config is None:
            from prefctl.config import config_path, load_config

            self._config = load_config(config_path(self.config_flag))
            for warning in self._config.warnings():
                self.out.warn(warning)
        return self._config

    def profile(
        self, overrides: Mapping[str, str | None] | None = None, *, service_urls: bool = True
    ) -> Profile:
        """The selected profile, resolved flags > env > file > defaults; plain http:// to another
        host is refused, or warned about when the profile allows it (unless not ``service_urls``:
        for commands that send nothing to the service)."""
        from prefctl.config import resolve_profile

        profile = resolve_profile(
            self.config(), self.profile_name, env=os.environ, overrides=overrides
        )
        for warning in profile.check_service_urls() if service_urls else []:
            self.out.warn(warning)
        return profile


current = State()


def get_state(ctx: typer.Context | None = None) -> State:
    """The state of this invocation (set by the root callback)."""
    return current


def set_state(state: State) -> None:
    global current
    current = state
