"""Built-in estimators: one strategy per module."""
