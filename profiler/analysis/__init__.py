"""Analysis: reads run directories only, returns typed results (dataclasses, no sentences) for the
renderers in profiler.report."""

from .compare import Comparison, OpRow, RunSide, compare
from .diagnose import Allocation, Diagnosis, EpochTime, GcSummary, StepSummary, Workers, analyze
from .findings import Finding
from .load import Loaded, load
from .scaling import Scaling, ScalingRow, scaling
from .series import EpochSeries, StepSeries, series, step_series

__all__ = ["Allocation", "Comparison", "Diagnosis", "EpochSeries", "EpochTime", "Finding", "GcSummary", "Loaded",
           "OpRow", "RunSide", "Scaling", "ScalingRow", "StepSeries", "StepSummary", "Workers", "analyze", "compare",
           "load", "scaling", "series", "step_series"]
