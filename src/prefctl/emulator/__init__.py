"""The embedded emulator of the service: token endpoint, REST API, event generation."""
