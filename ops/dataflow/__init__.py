"""What a pipeline file declares: the graph of collections and operators. Nothing here runs Spark."""
