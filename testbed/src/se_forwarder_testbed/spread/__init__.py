"""A service's maintenance spread by ``approve = "service"`` under chaos (issue 32): six real
agent processes, each with its own IMDS simulator serving its VM's Reboot (one NotBefore, three
zones), the coordinator's store (Azurite, a process), a seeded chaos driver (kill -9 of agents
and of Azurite, a partition between one agent and the store, one VM's clock off) and an
observer that checks, from the simulators and the records only, that the policy held.

``stand.py`` builds and restarts the pieces, ``chaos.py`` plans and plays the faults and
``observer.py`` judges; ``run.py`` puts them together (the bench and the tests call it).
"""
