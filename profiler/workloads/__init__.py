"""The code that is profiled, kept apart from the profiler proper: the numpy/numba training
engine, the built-in scenarios, the demo and the helper that runs them in fresh processes."""
