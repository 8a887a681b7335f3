"""Interoperability with the OpenAI wire formats (chat completions and Responses).

ctxfold's own :class:`~ctxfold.Message` is what the kernel works on; this package converts the
OpenAI chat message dicts (and SDK objects), tool schemas and usage objects an agent already
has into it and back.
"""
