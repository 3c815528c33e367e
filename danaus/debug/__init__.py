"""Remote debugging: ``breakpoint()`` in an actor stops that rank; `danaus debug` attaches.

See `danaus.debug.hook` for what stops, `danaus.debug.sessions` for the
controller's side, and `danaus.debug.repl` for the prompt people type at.
"""
