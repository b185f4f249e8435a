-- The service's data: profiles, subscriptions, settings, programs, events, the delivery queue and
-- bulk imports. Every table belongs to an account (accounts.service_client_id) and goes with it.
--
-- Times are Unix seconds in UTC as REAL (microsecond resolution), in every column of this file:
-- they compare and index as numbers and are formatted as RFC 3339 only at the edge
-- (store/timestamps.py). JSON columns hold the wire (PascalCase) form, written with orjson.

-- Profile ids come from a per-account sequence starting at 1001 and are never reused.
CREATE TABLE profile_sequences (
    service_client_id TEXT PRIMARY KEY REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    last_profile_id   INTEGER NOT NULL
);

-- A profile is its wire JSON; the columns beside it are what search and listing need.
CREATE TABLE profiles (
    service_client_id TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    profile_id        INTEGER NOT NULL,
    is_active         INTEGER NOT NULL CHECK (is_active IN (0, 1)),
    body              TEXT NOT NULL,
    created_at        REAL NOT NULL,
    modified_at       REAL NOT NULL,
    PRIMARY KEY (service_client_id, profile_id)
) WITHOUT ROWID;

-- Search keys, one row per key of a profile; each key ends with profile_id so that a search
-- reads its matches already in keyset order.
CREATE TABLE profile_emails (
    service_client_id TEXT NOT NULL,
    address           TEXT NOT NULL,            -- lower-cased
    profile_id        INTEGER NOT NULL,
    PRIMARY KEY (service_client_id, address, profile_id),
    FOREIGN KEY (service_client_id, profile_id) REFERENCES profiles (service_client_id, profile_id)
        ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX profile_emails_profile ON profile_emails (service_client_id, profile_id);

CREATE TABLE profile_phones (
    service_client_id TEXT NOT NULL,
    digits            TEXT NOT NULL,            -- the number's digits only
    profile_id        INTEGER NOT NULL,
    PRIMARY KEY (service_client_id, digits, profile_id),
    FOREIGN KEY (service_client_id, profile_id) REFERENCES profiles (service_client_id, profile_id)
        ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX profile_phones_profile ON profile_phones (service_client_id, profile_id);

CREATE TABLE profile_alternate_ids (
    service_client_id TEXT NOT NULL,
    value             TEXT NOT NULL,
    type              TEXT NOT NULL,
    profile_id        INTEGER NOT NULL,
    PRIMARY KEY (service_client_id, value, type, profile_id),
    FOREIGN KEY (service_client_id, profile_id) REFERENCES profiles (service_client_id, profile_id)
        ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX profile_alternate_ids_profile ON profile_alternate_ids (service_client_id, profile_id);

-- Webhook subscriptions. Ids are global and never reused (AUTOINCREMENT): receivers and dead
-- letters name them. The handshake columns are the provisioning code's bookkeeping.
CREATE TABLE subscriptions (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    service_client_id     TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    name                  TEXT NOT NULL,
    description           TEXT,
    url                   TEXT NOT NULL,
    state                 TEXT NOT NULL CHECK (state IN ('Active', 'Paused')),
    catch_up_on_resume    INTEGER NOT NULL CHECK (catch_up_on_resume IN (0, 1)),
    provisioning_state    TEXT NOT NULL CHECK (provisioning_state IN
                              ('Creating', 'Updating', 'AwaitingManualAction', 'Succeeded', 'Failed')),
    selections            TEXT NOT NULL,        -- JSON: the wire Subscriptions list
    alerts_enabled        INTEGER NOT NULL DEFAULT 0 CHECK (alerts_enabled IN (0, 1)),
    alert_recipients      TEXT NOT NULL DEFAULT '[]',
    created_at            REAL NOT NULL,
    created_by            TEXT,
    modified_at           REAL NOT NULL,
    modified_by           TEXT,
    validation_code       TEXT,
    validation_token      TEXT UNIQUE,
    validation_expires_at REAL,
    handshake_attempts    INTEGER NOT NULL DEFAULT 0,
    handshake_error       TEXT,
    provisioned_at        REAL
);
CREATE INDEX subscriptions_account ON subscriptions (service_client_id, id);

-- Which event types each subscription sends to its Url: the 409 rule as a constraint.
CREATE TABLE subscription_event_types (
    service_client_id TEXT NOT NULL,
    url               TEXT NOT NULL,
    event_type        TEXT NOT NULL,
    subscription_id   INTEGER NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    PRIMARY KEY (service_client_id, url, event_type)
) WITHOUT ROWID;
CREATE INDEX subscription_event_types_subscription ON subscription_event_types (subscription_id);

-- Account settings (docs/policy.md) by wire name; a setting without a row has its default.
CREATE TABLE webhook_settings (
    service_client_id TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    value             INTEGER NOT NULL,
    PRIMARY KEY (service_client_id, name)
) WITHOUT ROWID;

CREATE TABLE programs (
    service_client_id TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    program_id        INTEGER NOT NULL,
    name              TEXT NOT NULL,
    program_type      TEXT NOT NULL,
    filters           TEXT NOT NULL,            -- JSON: [{FilterId, Name}]
    channels          TEXT NOT NULL,            -- JSON: [string]
    PRIMARY KEY (service_client_id, program_id)
) WITHOUT ROWID;

-- Events, kept 15 days. `id` is internal (deliveries point at it); event_id is the wire EventId.
CREATE TABLE events (
    id                  INTEGER PRIMARY KEY,
    event_id            TEXT NOT NULL UNIQUE,
    service_client_id   TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    event_type          TEXT NOT NULL,
    entity              TEXT NOT NULL,
    profile_id          INTEGER,
    original_event_time REAL NOT NULL,
    data                TEXT NOT NULL,          -- JSON
    previous_data       TEXT,                   -- JSON or NULL
    filter_values       TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX events_time ON events (service_client_id, original_event_time);
CREATE INDEX events_profile ON events (service_client_id, profile_id, original_event_time);
CREATE INDEX events_type ON events (service_client_id, event_type, original_event_time);

-- The dispatcher's queue: one row per (event, subscription).
--   held           kept for a paused subscription with CatchUpOnResume (no EventTime yet)
--   queued         due at next_attempt_at
--   in_flight      claimed: lease_owner holds it until lease_until, then it is claimable again
--   delivered / dead_lettered   final (finished_at); dead_letter_reason says why
CREATE TABLE deliveries (
    id                 INTEGER PRIMARY KEY,
    event_rowid        INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    subscription_id    INTEGER NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    state              TEXT NOT NULL CHECK (state IN
                           ('held', 'queued', 'in_flight', 'delivered', 'dead_lettered')),
    event_time         REAL,                    -- when queued for this subscription (EventTime)
    attempts           INTEGER NOT NULL DEFAULT 0,
    next_attempt_at    REAL,
    lease_owner        TEXT,
    lease_until        REAL,
    first_attempt_at   REAL,
    last_attempt_at    REAL,
    last_status        INTEGER,
    last_error         TEXT,
    dead_letter_reason TEXT,
    finished_at        REAL,
    UNIQUE (event_rowid, subscription_id),
    CHECK (state <> 'queued' OR next_attempt_at IS NOT NULL),
    CHECK (state <> 'in_flight' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL))
);
-- Partial indexes hold only the rows still moving, so 100k delivered rows cost the claim nothing.
-- deliveries_subscription leaves state out on purpose: every claim and result changes the state,
-- and pause/resume (its users) are rare.
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE state = 'queued';
CREATE INDEX deliveries_leases ON deliveries (lease_until) WHERE state = 'in_flight';
CREATE INDEX deliveries_subscription ON deliveries (subscription_id);
CREATE INDEX deliveries_dead_letters ON deliveries (finished_at) WHERE state = 'dead_lettered';

-- Every attempt, including the ones skipped while an endpoint is on probation.
CREATE TABLE delivery_attempts (
    id             INTEGER PRIMARY KEY,
    delivery_id    INTEGER NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempt_number INTEGER NOT NULL,
    started_at     REAL NOT NULL,
    finished_at    REAL NOT NULL,
    outcome        TEXT NOT NULL,
    status         INTEGER,
    error          TEXT,
    latency_ms     REAL
);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id, id);

-- Bulk imports: initiate, stage records (repeatable), execute, status.
CREATE TABLE imports (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    service_client_id TEXT NOT NULL REFERENCES accounts (service_client_id) ON DELETE CASCADE,
    state             TEXT NOT NULL CHECK (state IN
                          ('Initiated', 'Staging', 'Queued', 'Processing', 'Completed', 'Failed')),
    created_at        REAL NOT NULL,
    created_by        TEXT,
    modified_at       REAL NOT NULL,
    total_records     INTEGER NOT NULL DEFAULT 0,
    processed_records INTEGER NOT NULL DEFAULT 0,
    created_profiles  INTEGER NOT NULL DEFAULT 0,
    replaced_profiles INTEGER NOT NULL DEFAULT 0,
    failed_records    INTEGER NOT NULL DEFAULT 0,
    error             TEXT
);
CREATE INDEX imports_account ON imports (service_client_id, id);

CREATE TABLE import_records (
    import_id INTEGER NOT NULL REFERENCES imports (id) ON DELETE CASCADE,
    seq       INTEGER NOT NULL,                 -- 1, 2, … in staging order
    body      TEXT NOT NULL,
    PRIMARY KEY (import_id, seq)
) WITHOUT ROWID;

CREATE TABLE import_errors (
    import_id INTEGER NOT NULL REFERENCES imports (id) ON DELETE CASCADE,
    seq       INTEGER NOT NULL,
    message   TEXT NOT NULL,
    PRIMARY KEY (import_id, seq)
) WITHOUT ROWID;
