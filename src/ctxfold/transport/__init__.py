"""Talking to providers over HTTP: the client, retries, error mapping, overflow parsing.

Provider plugins supply only a translator and their declared defaults
(:mod:`ctxfold.transport.provider`); everything on the wire is here. Importing this package
does not import httpx: the client loads when the first provider is built.
"""
