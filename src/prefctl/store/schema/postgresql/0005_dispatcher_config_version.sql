-- PostgreSQL's form of ../0005_dispatcher_config_version.sql: the counter, bumped by one
-- statement-level trigger per table (a statement that changes rows changes the counter once).
CREATE TABLE dispatcher_config_version (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO dispatcher_config_version (id, version) VALUES (1, 0);

CREATE FUNCTION bump_dispatcher_config_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE dispatcher_config_version SET version = version + 1 WHERE id = 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER accounts_bumps_config AFTER INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH STATEMENT EXECUTE FUNCTION bump_dispatcher_config_version();
CREATE TRIGGER webhook_settings_bumps_config AFTER INSERT OR UPDATE OR DELETE ON webhook_settings
    FOR EACH STATEMENT EXECUTE FUNCTION bump_dispatcher_config_version();
CREATE TRIGGER dispatcher_tls_bumps_config AFTER INSERT OR UPDATE OR DELETE ON dispatcher_tls
    FOR EACH STATEMENT EXECUTE FUNCTION bump_dispatcher_config_version();
