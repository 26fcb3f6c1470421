"""The machine and edgespec's files on it: devices, settings, paths, cache files, children."""
