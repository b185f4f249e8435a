-- PostgreSQL's form of ../0008_deliveries_held_index.sql.
DROP INDEX deliveries_subscription;
CREATE INDEX deliveries_held ON deliveries (subscription_id) WHERE state = 'held';
