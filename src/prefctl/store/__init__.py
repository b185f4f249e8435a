"""The SQLite store of the emulator and the dispatcher."""
