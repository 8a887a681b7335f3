"""The reliability harness of ctxfold (docs/reliability.md).

Every part drives ctxfold only through its public API (``import ctxfold``, the emulator from
``ctxfold.emulator``) in temporary directories and returns :class:`Figures`:

* ``kill`` — SIGKILL a worker process at random points of append/prepare/install;
* ``torn`` — torn writes, corrupt sidecars and leftover temp files simulated on disk;
* ``processes`` — N processes on one session: nothing committed missing from any view;
* ``fuzz_files`` / ``fuzz_calls`` — hypothesis over sidecars, transcripts, configs, importer
  inputs, ``use_capability`` arguments and ``append`` input;
* ``faults`` — provider faults through ``complete()`` against the loopback emulator;
* ``leaks`` — a grep for a fake API key and a URL password over everything written.

Run all of them with ``python -m benchmarks.reliability`` (``--help``: the sizes of each
part); the figures are described in docs/reliability.md.
"""
