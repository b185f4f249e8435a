"""The webhook dispatcher: delivery policy, the engine, handshake provisioning, alerts, replay."""
