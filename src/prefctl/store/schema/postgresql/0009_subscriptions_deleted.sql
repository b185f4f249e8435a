-- PostgreSQL's form of ../0009_subscriptions_deleted.sql.
ALTER TABLE subscriptions ADD COLUMN deleted_at DOUBLE PRECISION;
