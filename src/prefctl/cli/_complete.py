"""Values for shell completion (``prefctl --install-completion``): profile names, subscription
names and Ids, event types. Each reads only local files, answers in milliseconds, and gives no
values rather than an error (a completion must never print a traceback into the prompt)."""

from __future__ import annotations


def profile_names(incomplete: str) -> list[str]:
    """The profiles of ``profiles.toml`` (``PREFCTL_CONFIG`` honoured)."""
    try:
        from prefctl.config import config_path, load_config

        names = list(load_config(config_path(None)).profiles)
    except Exception:  # a broken file completes nothing; the command itself will say why
        return []
    return [name for name in names if name.startswith(incomplete)]


def subscription_refs(incomplete: str) -> list[str]:
    """Names and Ids of the subscriptions in the emulator's store (``PREFCTL_DATA_DIR``)."""
    try:
        import sqlite3

        from prefctl.config.paths import resolve_data_dir, store_path

        store = store_path(resolve_data_dir(None))
        if not store.is_file():
            return []
        conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=0.2)
        try:
            rows = conn.execute(
                "SELECT id, name FROM subscriptions WHERE deleted_at IS NULL ORDER BY id"
            ).fetchall()
        finally:
            conn.close()
    except Exception:
        return []
    values = [str(name) for _id, name in rows if name] + [str(id_) for id_, _name in rows]
    return [value for value in dict.fromkeys(values) if value.startswith(incomplete)]


def event_types(incomplete: str) -> list[str]:
    """The event types of the catalog."""
    from prefctl.webhooks.catalog import EVENT_TYPES

    return [name for name in EVENT_TYPES if name.startswith(incomplete)]
