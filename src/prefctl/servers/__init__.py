"""The plumbing under prefctl's servers (the emulator and the receiver), on uvicorn.

``server`` runs a uvicorn server that tells of its start and stops cleanly on a signal; ``loop``
makes the event loop and its greedy listener; ``connections`` bounds what one client can hold
(header and body deadlines, the header-size limit, the connection ceiling); ``seams`` checks the
uvicorn internals the fast paths use before they are used (see CONTRIBUTING.md, "Borrowed
internals").
"""
