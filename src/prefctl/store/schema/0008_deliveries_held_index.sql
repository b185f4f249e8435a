-- deliveries_subscription indexed every delivery by its subscription: inserted at as many places
-- of the index as there are subscriptions, it cost ~4k instructions per delivery, about 7 % of a
-- profile PATCH fanned out to 10 subscriptions (bench/api_inprocess.py, cachegrind). Its readers
-- are rare: pause and resume, and deleting a subscription. Only held deliveries are indexed by
-- subscription now (none but a paused subscription's, and no claim or result touches them);
-- pause and drop find the queued ones through deliveries_due. Deleting a subscription (or its
-- account) scans the deliveries for its foreign-key cascade. Measured with 100k deliveries to 10
-- subscriptions, as before the change: deleting one 60 ms (was 57), pausing 50 ms, resuming 27 ms.
DROP INDEX deliveries_subscription;
CREATE INDEX deliveries_held ON deliveries (subscription_id) WHERE state = 'held';
