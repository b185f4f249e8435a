"""The emulator's REST API (docs/api.md): one module per resource, each exposing ``router``.

``prefctl.emulator.api`` includes them in the app with the RFC 9457 error handlers, the body-size
limit and the OpenAPI post-processing; ``_common`` holds what every route shares (authorization,
problems, JSON answers).
"""
