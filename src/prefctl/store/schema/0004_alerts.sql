-- Failure alerts (docs/alerts.md): the dead letters waiting to be reported, the incidents of each
-- subscription, and every alert email composed, with its full text, whether it went out by SMTP
-- or into alerts.mbox. Times are Unix seconds in UTC (REAL), like 0002.

-- An incident per run of failures of one subscription. At most one is not closed at a time.
--   open    alerts go out as dead letters come, spaced by the doubling gap
--   paused  AlertThresholdMax dead letters were counted: the last alert said so, no more are sent
--   closed  after a 200 to the subscription, or AlertFrequencyMax minutes without dead letters
CREATE TABLE alert_incidents (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    service_client_id   TEXT NOT NULL,
    subscription_id     INTEGER NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    state               TEXT NOT NULL CHECK (state IN ('open', 'paused', 'closed')),
    opened_at           REAL NOT NULL,
    last_dead_letter_at REAL NOT NULL,
    dead_letters        INTEGER NOT NULL,       -- counted so far, reported or not
    alerts_sent         INTEGER NOT NULL DEFAULT 0,
    last_alert_at       REAL,
    next_alert_at       REAL,                   -- the earliest time the next alert may go
    recovered_at        REAL,                   -- a 200 came while dead letters awaited an alert
    closed_at           REAL,
    close_reason        TEXT CHECK (close_reason IN ('delivered', 'quiet', 'alerts_disabled')),
    CHECK ((state = 'closed') = (closed_at IS NOT NULL))
);
CREATE UNIQUE INDEX alert_incidents_current ON alert_incidents (subscription_id)
    WHERE state <> 'closed';

-- Dead letters of alert-enabled subscriptions not yet in an alert: before an incident opens
-- (incident_id NULL, kept for the AlertFrequencyMin window) or waiting for the next batched
-- alert. Rows go once an alert reports them; a paused incident only counts.
CREATE TABLE alert_dead_letters (
    id               INTEGER PRIMARY KEY,
    subscription_id  INTEGER NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    incident_id      INTEGER REFERENCES alert_incidents (id) ON DELETE CASCADE,
    event_id         TEXT NOT NULL,
    reason           TEXT NOT NULL,
    attempts         INTEGER NOT NULL,
    last_status      INTEGER,
    last_error       TEXT,
    first_attempt_at REAL,
    last_attempt_at  REAL,
    dead_lettered_at REAL NOT NULL
);
CREATE INDEX alert_dead_letters_subscription
    ON alert_dead_letters (subscription_id, incident_id, dead_lettered_at);
CREATE INDEX alert_dead_letters_incident ON alert_dead_letters (incident_id);

-- Every alert email: written here first (pending), then sent, then marked with the sink that
-- took it. The history outlives the subscription (no foreign keys): the email was sent.
CREATE TABLE alert_messages (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    incident_id       INTEGER NOT NULL,
    service_client_id TEXT NOT NULL,
    subscription_id   INTEGER NOT NULL,
    subscription_name TEXT NOT NULL,
    kind              TEXT NOT NULL CHECK (kind IN ('opened', 'update', 'paused', 'recovered')),
    sequence          INTEGER NOT NULL,         -- 1 for the incident's first alert
    dead_letters      INTEGER NOT NULL,         -- reported in this alert
    incident_dead_letters INTEGER NOT NULL,     -- counted by the incident when it was written
    recipients        TEXT NOT NULL,            -- JSON array
    subject           TEXT NOT NULL,
    message_id        TEXT NOT NULL UNIQUE,
    message           TEXT NOT NULL,            -- the RFC 5322 text
    created_at        REAL NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('pending', 'sent')),
    sink              TEXT CHECK (sink IN ('smtp', 'mbox')),
    sent_at           REAL,
    smtp_error        TEXT                      -- why SMTP did not take it (then: the mbox)
);
CREATE INDEX alert_messages_pending ON alert_messages (id) WHERE state = 'pending';
CREATE INDEX alert_messages_subscription ON alert_messages (subscription_id, created_at);
