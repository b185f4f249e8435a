-- prefctl: foreign_keys=off
-- deliveries.state is checked with comparisons instead of IN (…): SQLite evaluates a CHECK's IN
-- list of more than two values through a temporary b-tree built for every row it checks, which was
-- over a quarter of inserting a delivery (bench/api.py) and is paid again by every claim and result
-- that changes the state. Same rule, same rows; the table is rebuilt because SQLite cannot alter a
-- CHECK in place (https://www.sqlite.org/lang_altertable.html#otheralter).
CREATE TABLE deliveries_rebuilt (
    id                 INTEGER PRIMARY KEY,
    event_rowid        INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    subscription_id    INTEGER NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    state              TEXT NOT NULL CHECK (
                           state = 'held' OR state = 'queued' OR state = 'in_flight'
                           OR state = 'delivered' OR state = 'dead_lettered'),
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
INSERT INTO deliveries_rebuilt
    (id, event_rowid, subscription_id, state, event_time, attempts, next_attempt_at, lease_owner,
     lease_until, first_attempt_at, last_attempt_at, last_status, last_error, dead_letter_reason,
     finished_at)
SELECT id, event_rowid, subscription_id, state, event_time, attempts, next_attempt_at, lease_owner,
       lease_until, first_attempt_at, last_attempt_at, last_status, last_error, dead_letter_reason,
       finished_at
FROM deliveries;
DROP TABLE deliveries;
ALTER TABLE deliveries_rebuilt RENAME TO deliveries;
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE state = 'queued';
CREATE INDEX deliveries_leases ON deliveries (lease_until) WHERE state = 'in_flight';
CREATE INDEX deliveries_subscription ON deliveries (subscription_id);
CREATE INDEX deliveries_dead_letters ON deliveries (finished_at) WHERE state = 'dead_lettered';
