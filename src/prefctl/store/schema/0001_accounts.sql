-- Accounts, OAuth clients, API users and the token service's keys and bookkeeping.
-- Times are Unix seconds in UTC (REAL, or INTEGER where they come from JWT claims), formatted as
-- RFC 3339 only at the edge (store/timestamps.py).

-- One account per service client id: the REST path parameter and the webhook signing identity.
CREATE TABLE accounts (
    service_client_id TEXT PRIMARY KEY,
    environment       TEXT NOT NULL DEFAULT 'Sandbox' CHECK (environment IN ('Sandbox', 'Production')),
    hashkey           TEXT NOT NULL,            -- webhook signature key (must stay usable: plain)
    signature_user_id TEXT NOT NULL,            -- EventsClientSignatureUserId
    created_at        REAL NOT NULL
);

-- OAuth clients of the token endpoint. The secret is kept only as salt + SHA-256(salt || secret);
-- a certificate client keeps its PEM and the base64url SHA-256 thumbprint of its DER form.
CREATE TABLE oauth_clients (
    client_id              TEXT PRIMARY KEY CHECK (length(client_id) = 48),
    service_client_id      TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    name                   TEXT NOT NULL DEFAULT '',
    secret_salt            TEXT,
    secret_hash            TEXT,
    certificate_pem        TEXT,
    certificate_thumbprint TEXT UNIQUE,
    token_lifetime_minutes INTEGER NOT NULL DEFAULT 60 CHECK (token_lifetime_minutes > 0),
    created_at             REAL NOT NULL,
    CHECK ((secret_hash IS NULL) = (secret_salt IS NULL)),
    CHECK ((certificate_pem IS NULL) = (certificate_thumbprint IS NULL)),
    CHECK (secret_hash IS NOT NULL OR certificate_pem IS NOT NULL)
);
CREATE INDEX oauth_clients_account ON oauth_clients (service_client_id);

-- API users named in a token's scope <service_client_id>/<user_id>.
CREATE TABLE users (
    service_client_id TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    user_id           TEXT NOT NULL,
    is_active         INTEGER NOT NULL DEFAULT 1 CHECK (is_active IN (0, 1)),
    created_at        REAL NOT NULL,
    PRIMARY KEY (service_client_id, user_id)
);

CREATE TABLE user_permissions (
    service_client_id TEXT NOT NULL,
    user_id           TEXT NOT NULL,
    permission        TEXT NOT NULL,
    PRIMARY KEY (service_client_id, user_id, permission),
    FOREIGN KEY (service_client_id, user_id) REFERENCES users (service_client_id, user_id)
        ON DELETE CASCADE
);

-- The credentials written into profile 'local' on every start: the bootstrap client's secret is
-- kept here in plain so that a restart can refresh the profile without rotating it.
CREATE TABLE local_credentials (
    singleton         INTEGER PRIMARY KEY CHECK (singleton = 1),
    service_client_id TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    user_id           TEXT NOT NULL,
    client_id         TEXT NOT NULL REFERENCES oauth_clients (client_id) ON DELETE CASCADE,
    client_secret     TEXT NOT NULL
);

-- RSA keys that sign access tokens; kid is the RFC 7638 thumbprint of the public key.
CREATE TABLE signing_keys (
    kid             TEXT PRIMARY KEY,
    private_key_pem TEXT NOT NULL,
    created_at      REAL NOT NULL
);

-- Every access token issued, so that revocation can name what it revokes.
CREATE TABLE issued_tokens (
    jti        TEXT PRIMARY KEY,
    client_id  TEXT NOT NULL,
    scope      TEXT NOT NULL,
    issued_at  INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX issued_tokens_expiry ON issued_tokens (expires_at);

CREATE TABLE revoked_tokens (
    jti        TEXT PRIMARY KEY,
    revoked_at REAL NOT NULL
);

-- jti of client assertions already accepted, kept until the assertion would have expired.
CREATE TABLE used_assertions (
    client_id  TEXT NOT NULL,
    jti        TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (client_id, jti)
);
CREATE INDEX used_assertions_expiry ON used_assertions (expires_at);
