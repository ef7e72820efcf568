"""LIBERO-PeRM preferences on the workcell: the catalogue, the metrics that score what the robot did, the
calibrated labels, SR/SA scoring and the report. Pure Python + numpy (no ROS, no MuJoCo): the same code
scores simulated and physical episodes."""
