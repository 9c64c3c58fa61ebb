"""``iterate``: fixed points, round by round on the driver or inside Spark tasks."""
