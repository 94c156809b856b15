"""The run command (``fabric-core run``) and what its processes share with ``RunCheckpoints``.

``command`` parses and validates the options and hands them to a runner (torchrun by default); ``agent`` is the
launcher side of torch's elastic agent; ``worker`` starts each worker and ties it to its launcher; ``checks``
validates a run before anything starts; ``preemption`` turns SIGTERM (or SLURM's requeue signal) into a save at
the next step boundary; ``rng_states`` gathers and restores every rank's random generators.
"""
