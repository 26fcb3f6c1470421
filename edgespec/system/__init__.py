"""What the machine offers and where edgespec keeps its files: devices, settings, paths, cache
files, child processes."""
