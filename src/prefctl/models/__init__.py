"""Pydantic wire models shared by the client, the emulator and the receiver.

Import the submodule you need (``prefctl.models.profile``…): this package imports nothing itself,
so that commands which never touch a model (``token get``) do not pay for pydantic.
"""
