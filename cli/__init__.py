"""The `citeflow` command line: the top layer, which composes flows, deployments and the store."""
