"""Replay: re-deliver stored, dead-lettered or captured events through the dispatcher.

``run.replay(config)`` is what ``prefctl replay`` forwards to; ``model`` holds what a replay is
asked to do and what it reports, ``queue`` selects and queues its events, ``direct`` replays to
a URL with no subscription, and ``wait`` waits for the replayed deliveries to end."""
