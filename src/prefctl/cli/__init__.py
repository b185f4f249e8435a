"""The command-line interface: Typer commands that parse, call core code and render."""
