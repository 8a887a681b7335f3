"""The engine: :class:`~ctxfold.engine.manager.ContextManager` and :func:`open_session`.

It composes the kernel's parts for one session; nothing in the kernel imports it back.
"""
