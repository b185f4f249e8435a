"""The webhook contract: event catalog, signatures and handshake messages."""
