"""Built-in summarizers: one strategy per module."""
