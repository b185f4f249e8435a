"""The docs are checked: every command and option has help, docs/cli.md lists every command and is
what the generator writes today, and the configuration docs cover every key and variable."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer

from prefctl import config

ROOT = Path(__file__).resolve().parent.parent
CLI_MD = ROOT / "docs" / "cli.md"
CONFIGURATION_MD = ROOT / "docs" / "configuration.md"
EXAMPLE = ROOT / "profiles.toml.example"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    """scripts/gen_cli_reference.py, loaded as a module."""
    spec = importlib.util.spec_from_file_location(
        "gen_cli_reference", ROOT / "scripts" / "gen_cli_reference.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def app(gen: ModuleType) -> typer.Typer:
    return gen.full_app()


@pytest.fixture(scope="module")
def commands(gen: ModuleType, app: typer.Typer) -> list[tuple[str, Any, Any]]:
    """``(command path, command, context)`` for every visible command and group."""
    root = typer.main.get_command(app)
    ctx = root.make_context("prefctl", [], resilient_parsing=True)
    return [(c.command_path, command, c) for c, command in gen.walk(root, ctx)]


def test_every_command_has_help(commands: list[tuple[str, Any, Any]]) -> None:
    missing = [path for path, command, _ in commands if not (command.help or "").strip()]
    assert missing == [], f"commands without help: {missing}"


def test_every_option_and_argument_has_help(commands: list[tuple[str, Any, Any]]) -> None:
    missing = [
        f"{path} {param.opts[0]}"
        for path, command, _ in commands
        for param in command.params
        if param.name != "help"
        and not getattr(param, "hidden", False)
        and not (param.help or "").strip()
    ]
    assert missing == [], f"options or arguments without help: {missing}"


def test_every_command_has_a_section_in_cli_md(commands: list[tuple[str, Any, Any]]) -> None:
    headings = {
        line.lstrip("#").strip() for line in CLI_MD.read_text().splitlines() if line.startswith("#")
    }
    missing = [path for path, _, _ in commands if path not in headings]
    assert missing == [], f"missing from docs/cli.md: {missing}"


def test_cli_md_is_what_the_generator_writes(gen: ModuleType, app: typer.Typer) -> None:
    assert CLI_MD.read_text() == gen.render(app), (
        "docs/cli.md is stale: run python scripts/gen_cli_reference.py"
    )


def test_generator_output_ignores_terminal_width_and_colour(
    gen: ModuleType, app: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR")
    narrow = gen.render(app)
    monkeypatch.setenv("COLUMNS", "250")
    assert gen.render(app) == narrow
    assert "\x1b[" not in narrow


def test_generator_renders_options_env_vars_and_defaults(gen: ModuleType, app: typer.Typer) -> None:
    text = gen.render(app)
    assert "| `-o, --output <table\\|json\\|wide>` |" in text
    assert "env var: PREFCTL_OUTPUT; default: table" in text
    assert "`--auth-url TEXT`" in text  # a value named in words, not <str>
    assert "```\nprefctl config set [OPTIONS] {NAME} {KEY} [VALUE]\n```" in text


def test_generator_check_mode_fails_when_stale(gen: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "cli.md"
    out.write_text("old\n")
    assert gen.main(["--check", "--output", str(out)]) == 1
    assert gen.main(["--output", str(out)]) == 0
    assert gen.main(["--check", "--output", str(out)]) == 0


# -- configuration docs ------------------------------------------------------------------------------


def test_configuration_md_documents_every_key_and_variable() -> None:
    text = CONFIGURATION_MD.read_text()
    names = [
        *config.ALL_KEYS,
        *(config.env_var_for(key) for key in config.ALL_KEYS),
        config.ENV_CONFIG,
        config.ENV_PROFILE,
        config.ENV_OUTPUT,
        config.ENV_CACHE_DIR,
        config.ENV_DATA_DIR,
        "NO_COLOR",
    ]
    missing = [name for name in names if f"`{name}`" not in text]
    assert missing == [], f"not in docs/configuration.md: {missing}"


def test_example_file_is_valid_and_documents_every_key() -> None:
    text = EXAMPLE.read_text()
    cfg = config.load_config(EXAMPLE)
    assert cfg.default in cfg.profiles
    for key in config.ALL_KEYS:
        bare = key.rsplit(".", 1)[-1]
        assert re.search(rf"^#? ?{bare} = ", text, re.MULTILINE), f"{key} not in the example"


_RULE_PAGES = ("alerts.md", "policy.md", "simulate.md", "subscriptions.md", "webhooks.md")


def test_docs_mark_every_decision_one_way() -> None:
    # Decisions the spec leaves open are marked **[decision]**, never "Decision(s)" in another
    # form; the pages of the delivery rules never cite the internal design document.
    decision = re.compile(r"\*\*Decisions?\b|^Decisions?\b[^.\n]*:$|\(\[decision\]", re.M)
    design = re.compile(r"DESIGN §")
    found = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.name}: {m.group(0)}" for m in decision.finditer(text)]
        if path.name in _RULE_PAGES:
            found += [f"{path.name}: {m.group(0)}" for m in design.finditer(text)]
    assert found == []


def test_no_doc_names_the_design_file_users_do_not_have() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    naming = [str(path.relative_to(ROOT)) for path in docs if "DESIGN" in path.read_text()]
    assert naming == [], "docs must stand alone: say the fact instead of citing DESIGN"


def test_no_source_cites_a_design_file_outside_this_repository() -> None:
    # Contributors get the repository, not the team's design notes: a docstring or comment
    # points at a file here (docs/, CONTRIBUTING.md) or says the fact in place.
    sources = [ROOT / "CONTRIBUTING.md"]
    for folder in ("src", "tests", "bench", "scripts"):
        sources += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sql", ".md")]
    citing = [
        str(path.relative_to(ROOT))
        for path in sources
        if path != Path(__file__) and re.search(r"DESIGN(\.md| ?§| [0-9])", path.read_text())
    ]
    assert citing == []


def test_root_help_summaries_are_each_commands_own(commands: list[tuple[str, Any, Any]]) -> None:
    from prefctl.cli.app import SUMMARIES

    own = {
        path.split()[1]: (command.help or "").split("\n\n")[0].replace("\n", " ")
        for path, command, _ctx in commands
        if len(path.split()) == 2
    }
    assert own == SUMMARIES


def test_api_md_profile_example_is_accepted_by_the_emulator(emulator: Any) -> None:
    import json

    from tests.helpers import run_cli

    text = (ROOT / "docs" / "api.md").read_text()
    match = re.search(r"<!-- profile-example[^>]*-->\n```json\n(.*?)```", text, re.S)
    assert match is not None
    example = json.loads(match.group(1))
    created = run_cli("api", "POST", "profiles", "--data", json.dumps(example))
    assert created.exit_code == 0, created.stderr
    stored = created.json
    assert stored["CustomerName"] == example["CustomerName"]
    assert stored["Consents"][0]["Elements"] == ["Email:ada@example.com"]
