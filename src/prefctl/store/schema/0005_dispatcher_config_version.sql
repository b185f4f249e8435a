-- A counter of changes to what the dispatcher reads at every cycle: accounts (signing keys),
-- webhook settings and delivery TLS. Triggers bump it on every insert, update and delete, from any
-- connection or process, so the dispatcher reads one integer per cycle and the rows themselves only
-- after a change (store.dispatcher_state.config_version).
CREATE TABLE dispatcher_config_version (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
INSERT INTO dispatcher_config_version (id, version) VALUES (1, 0);

CREATE TRIGGER accounts_insert_bumps_config AFTER INSERT ON accounts
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER accounts_update_bumps_config AFTER UPDATE ON accounts
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER accounts_delete_bumps_config AFTER DELETE ON accounts
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER webhook_settings_insert_bumps_config AFTER INSERT ON webhook_settings
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER webhook_settings_update_bumps_config AFTER UPDATE ON webhook_settings
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER webhook_settings_delete_bumps_config AFTER DELETE ON webhook_settings
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER dispatcher_tls_insert_bumps_config AFTER INSERT ON dispatcher_tls
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER dispatcher_tls_update_bumps_config AFTER UPDATE ON dispatcher_tls
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER dispatcher_tls_delete_bumps_config AFTER DELETE ON dispatcher_tls
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
END;
