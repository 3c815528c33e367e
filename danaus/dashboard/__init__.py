"""The dashboard: a live web page of a running job, or of a simulated run (``danaus dashboard``).

`sources` says where views come from (a job's admin socket, or
`simulated` runs), `page` what the page draws from them, `logs` who printed
each line, `reports` which report files are served, `access` who may look,
`server` the web server, and `launch` the command. The page itself, its
script and its style are in ``static/``.
"""
