-- A counter of changes to subscriptions. Triggers bump it on every insert, update and delete,
-- from any connection or process, so the profile write path reads one integer per write and its
-- fan-out targets only after a change (store.subscriptions.subscriptions_version; as a query of
-- every target per write it was the largest single step of a PATCH after the SQL writes).
CREATE TABLE subscriptions_version (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
INSERT INTO subscriptions_version (id, version) VALUES (1, 0);

CREATE TRIGGER subscriptions_insert_bumps_version AFTER INSERT ON subscriptions
BEGIN
    UPDATE subscriptions_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER subscriptions_update_bumps_version AFTER UPDATE ON subscriptions
BEGIN
    UPDATE subscriptions_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER subscriptions_delete_bumps_version AFTER DELETE ON subscriptions
BEGIN
    UPDATE subscriptions_version SET version = version + 1 WHERE id = 1;
END;
