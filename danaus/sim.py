"""Run Danaus programs on a deterministic simulated cluster.

``danaus.sim.run(main, hosts=4, seed=7)`` runs ``main`` on four simulated hosts
and returns its value with the run's trace. Or select the simulator for a
whole script with ``danaus.configure(transport="sim", hosts=4, seed=7)`` or
``DANAUS_TRANSPORT=sim``.
"""

from danaus.transports.sim import NetworkModel, SimRun, SimulationStalled, run

__all__ = ["NetworkModel", "SimRun", "SimulationStalled", "run"]
