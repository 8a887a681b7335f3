"""Built-in plugins. They use exactly the hooks third parties use.

``DEFAULT_PLUGINS`` lists the modules the plugin manager registers, in order. Each module
implements one or more registration hooks of :mod:`ctxfold.kernel.hookspecs`.
"""

DEFAULT_PLUGINS: tuple[str, ...] = (
    # one line per built-in plugin module
)
