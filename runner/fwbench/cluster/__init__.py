"""Scale-out: a cell plan written once, run by a cluster's own scheduler (a Slurm job array, Kubernetes Indexed Jobs), one scheduler task per cell."""
