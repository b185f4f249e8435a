-- A deleted subscription stays as a tombstone, so that its dead letters (and the delivery history
-- that names it) outlive it: docs/dispatcher.md keeps the subscription in a dead-letter record. The API,
-- fan-out, provisioning and the name and Url checks see only rows whose deleted_at is NULL; the
-- delete itself removes what would still act (pending deliveries, its event types, alerting).
ALTER TABLE subscriptions ADD COLUMN deleted_at REAL;
