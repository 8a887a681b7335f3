"""The ctxfold command line."""
