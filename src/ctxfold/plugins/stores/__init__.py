"""Built-in stores: one strategy per module."""
