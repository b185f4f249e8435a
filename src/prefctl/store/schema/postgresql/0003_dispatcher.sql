-- PostgreSQL's form of ../0003_dispatcher.sql.

CREATE TABLE endpoint_health (
    service_client_id      TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    url                    TEXT NOT NULL,
    consecutive_failures   BIGINT NOT NULL,
    on_probation           INTEGER NOT NULL CHECK (on_probation IN (0, 1)),
    probe_interval_seconds DOUBLE PRECISION NOT NULL,
    next_probe_at          DOUBLE PRECISION,
    updated_at             DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (service_client_id, url)
);

CREATE TABLE dispatcher_tls (
    service_client_id TEXT PRIMARY KEY REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    client_cert_pem   TEXT,
    client_key_pem    TEXT,
    ca_pem            TEXT,
    updated_at        DOUBLE PRECISION NOT NULL,
    CHECK ((client_cert_pem IS NULL) = (client_key_pem IS NULL)),
    CHECK (client_cert_pem IS NOT NULL OR ca_pem IS NOT NULL)
);
