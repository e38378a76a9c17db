"""Communication: NCCL kernels as collectives (collectives.py) and what the views across ranks
derive in one pass (passes.py): compute/communication shares per rank and step (shares.py) and
each collective instance's arrivals and waits (arrivals.py)."""
