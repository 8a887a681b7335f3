"""ctxfold kernel: hooks, registry, value objects, errors and the maintenance engine."""
