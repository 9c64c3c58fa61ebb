"""Update frames to and from a store's layer files, inside Spark."""
