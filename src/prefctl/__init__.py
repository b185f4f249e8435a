"""prefctl: tokens, administration, a local webhook receiver and an embedded emulator of the
preference & consent management service."""

__version__ = "0.1.0"
