"""Session logs in MCAP: the graph's topics as received, with their ROS 2 schemas (docs/session_log.md)."""
