"""Built-in transcript importers (strategy family ``importer``), one format per module.

Each module registers one importer through the ``ctxfold_importers`` hook; the kernel's
:func:`ctxfold.importing.import_session` detects the format and loads it. See
``docs/importers.md`` for the formats and how each maps to canonical messages.
"""
