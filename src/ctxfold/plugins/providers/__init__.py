"""Built-in providers: one strategy per module."""
