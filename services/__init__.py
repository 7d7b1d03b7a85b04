"""kloom's service processes: the REST API and the GPU workers."""
