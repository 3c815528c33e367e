"""Looking at a running job: its procs, actors, mailboxes and failures (`danaus top`).

`views` says what a tool sees, `probes` what each proc reports, `service` how
the controller gathers it, `protocol` what travels, `jobfile` how a tool
finds a job, and `top` the terminal view.
"""
