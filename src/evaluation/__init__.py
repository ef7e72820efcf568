"""The LIBERO-Industry evaluation protocol: trials, metrics, the sim and real-workcell runners, the report."""
