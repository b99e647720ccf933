"""The ``bridge`` command: one typer app, one module per sub-command group."""
