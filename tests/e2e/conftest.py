pytest_plugins = ["ctxfold.testing"]
