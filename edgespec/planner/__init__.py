"""The planner: measure the device, decide what fits and how far to speculate."""
