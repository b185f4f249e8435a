-- The dispatcher's own state: endpoint health (probation) and the TLS identity it delivers with.
-- Times are Unix seconds in UTC (REAL), like 0002.

-- Probation bookkeeping per (account, Url), so that a restart does not forget an unhealthy
-- endpoint (dispatcher/policy.py EndpointHealth). A row exists only while the endpoint has failed
-- since its last 200; a 200 deletes it. probe_interval_seconds is in delivery-rule seconds (before
-- --time-scale); next_probe_at is a real time.
CREATE TABLE endpoint_health (
    service_client_id      TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    url                    TEXT NOT NULL,
    consecutive_failures   INTEGER NOT NULL,
    on_probation           INTEGER NOT NULL CHECK (on_probation IN (0, 1)),
    probe_interval_seconds REAL NOT NULL,
    next_probe_at          REAL,
    updated_at             REAL NOT NULL,
    PRIMARY KEY (service_client_id, url)
) WITHOUT ROWID;

-- What the support team installs for mutual TLS (spec "mTLS for webhooks"): the client certificate
-- and key the dispatcher presents, and the CAs it trusts for receivers besides the system's.
-- PEM text, kept in the store (mode 0600) so that it travels with the account.
CREATE TABLE dispatcher_tls (
    service_client_id TEXT PRIMARY KEY REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    client_cert_pem   TEXT,
    client_key_pem    TEXT,
    ca_pem            TEXT,
    updated_at        REAL NOT NULL,
    CHECK ((client_cert_pem IS NULL) = (client_key_pem IS NULL)),
    CHECK (client_cert_pem IS NOT NULL OR ca_pem IS NOT NULL)
);
