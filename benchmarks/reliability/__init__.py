"""The reliability harness of ctxfold (docs/reliability.md).

Every part drives ctxfold only through its public API (``import ctxfold``, the emulator from
``ctxfold.emulator``) in temporary directories and returns :class:`Figures`:

* ``kill`` — SIGKILL a worker process at random points of append/prepare/install;
* ``torn`` — torn writes, corrupt sidecars and leftover temp files simulated on disk;
* ``processes`` — N processes on one session, on ``fs`` and PostgreSQL: nothing committed
  missing from any view, no checkpoint dropped, the session never wedged;
* ``fuzz_files`` / ``fuzz_calls`` / ``fuzz_search`` / ``fuzz_proxy`` — hypothesis over
  sidecars, transcripts, configs, importer inputs, ``use_capability`` arguments (hostile
  regexes timed in a child process), ``append`` input and ``ctxfold serve`` request bodies;
* ``faults`` — provider faults through ``complete()`` against the loopback emulator;
* ``leaks`` — a grep for a fake API key and a URL password over everything written.

Run all of them with ``python -m benchmarks.reliability`` (``--help``: the sizes of each
part); the figures are described in docs/reliability.md.
"""
