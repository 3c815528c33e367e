"""Monarch's introductory example, unchanged but for the import.

Run it on the simulator with ``DANAUS_TRANSPORT=sim python examples/monarch_intro.py``.
"""

from danaus import Actor, endpoint, this_host

procs = this_host().spawn_procs({"gpus": 8})


class Example(Actor):
    @endpoint
    def say_hello(self, txt):
        return f"hello {txt}"


actors = procs.spawn("actors", Example)
hello_future = actors.say_hello.call("world")
print(hello_future.get())
