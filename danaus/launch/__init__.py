"""How procs are started: local subprocesses today."""
