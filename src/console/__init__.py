"""The operator's console: a web page served by a node of the graph (docs/console.md)."""
