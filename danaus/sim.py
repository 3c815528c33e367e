"""Run Danaus programs on a deterministic simulated cluster.

``danaus.sim.run(main, hosts=4, seed=7)`` runs ``main`` on four simulated hosts
and returns its value with the run's trace. Or select the simulator for a
whole script with ``danaus.configure(transport="sim", hosts=4, seed=7)`` or
``DANAUS_TRANSPORT=sim``; then ``asyncio.run(main())`` runs on the simulator,
as does ``asyncio.run(main(), loop_factory=danaus.sim.loop_factory)``.
"""

from danaus.transports.sim import (
    NetworkModel,
    SimRun,
    SimulationStalled,
    SimulationTimeLimit,
    loop_factory,
    run,
)

__all__ = [
    "NetworkModel",
    "SimRun",
    "SimulationStalled",
    "SimulationTimeLimit",
    "loop_factory",
    "run",
]
