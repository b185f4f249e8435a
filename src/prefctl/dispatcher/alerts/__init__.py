"""Failure alerts: the incident rules fed by dead letters (``monitor``), the email an alert
sends (``message``), where it goes (``mail``: SMTP or the data dir's mbox) and what was sent
(``log``)."""
