"""Demonstration recording: an episode writer that knows HDF5 and nothing of ROS (LIBERO's layout, images
written off the control path, crash safety), under a node that pairs observations with actions."""
