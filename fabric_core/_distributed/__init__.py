"""The distributed runtime: the process group the parallel strategies create, its collectives and its diagnostics.

The parallel strategies (``strategies/parallel.py`` and the plugins' strategies built on it) start and end the
process group through these modules; ``Fabric``'s collectives record and check each call here; ``fabric-core
run`` uses the network choice and the rendezvous timeout. Nothing here is a strategy, and nothing here imports
one. Its modules:

- ``rendezvous``: creating the process group within a rendezvous timeout, with errors that name the variables
  and the ranks that never came;
- ``rendezvous_watch``: while the processes meet, a rank that fails takes every rank of every node down within
  seconds (a heartbeat through the elastic agent's store);
- ``network``: which network interface the processes talk through where the host name resolves to loopback
  (torch-free: the launcher asks it too);
- ``collectives``: ``all_gather`` and ``all_reduce`` on tensors and nested collections, with shapes and dtypes
  agreed between the ranks before the backend sees them;
- ``flight_recorder``: the last ``Fabric`` collectives of this process, and the first call at which the ranks
  parted;
- ``collective_check``: named barriers, and the opt-in check (``FABRIC_CORE_CHECK_COLLECTIVES``) that the ranks
  are about to issue the same collective; a mismatch fails on every rank, naming each rank's call;
- ``watchdog``: a collective that waits too long prints where every rank is, and with
  ``FABRIC_CORE_HANG_ABORT_SECONDS`` stops the job;
- ``exit_handshake``: how a process with a process group ends: whether it failed, and a barrier that cannot
  hang (``FABRIC_CORE_EXIT_TIMEOUT``).
"""
