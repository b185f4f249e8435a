-- PostgreSQL's form of ../0007_subscriptions_version.sql.
CREATE TABLE subscriptions_version (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO subscriptions_version (id, version) VALUES (1, 0);

CREATE FUNCTION bump_subscriptions_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE subscriptions_version SET version = version + 1 WHERE id = 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER subscriptions_bumps_version AFTER INSERT OR UPDATE OR DELETE ON subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION bump_subscriptions_version();
