-- The account's limits held across every dispatcher process on the store (docs/dispatcher.md):
-- its delivery cycle (Duration) and its requests in flight (MaxConcurrentRequests) live here, not
-- in one process. No foreign keys: a dispatcher may still report for an account being removed,
-- and the rows of a removed account are inert (a cycle time, slots whose lease ends).
-- Times are Unix seconds in UTC (REAL), like 0002.

-- When the account's next cycle may start. The dispatcher that takes a cycle moves it on by
-- Duration, in the transaction that claims the cycle's deliveries; the others wait for it.
CREATE TABLE dispatcher_cycles (
    service_client_id TEXT PRIMARY KEY,
    next_cycle_at     REAL NOT NULL
);

-- Each dispatcher's requests in flight per account, as it last reported them (it reports at every
-- cycle of the account). A row is a lease, like a claim's: the rows of a dispatcher that died
-- stop counting at lease_until, and its share of the ceiling comes back.
CREATE TABLE dispatcher_slots (
    service_client_id TEXT NOT NULL,
    owner             TEXT NOT NULL,
    in_flight         INTEGER NOT NULL CHECK (in_flight >= 0),
    lease_until       REAL NOT NULL,
    PRIMARY KEY (service_client_id, owner)
);

-- An alert email is sent by one dispatcher: the one that claimed it (until claimed_until, after
-- which another may, so that an alert whose sender died is still sent).
ALTER TABLE alert_messages ADD COLUMN claimed_by TEXT;
ALTER TABLE alert_messages ADD COLUMN claimed_until REAL;
