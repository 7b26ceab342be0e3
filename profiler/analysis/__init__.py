"""Analysis: reads run directories only, returns plain result objects for the renderers."""

from .compare import Comparison, compare
from .diagnose import Diagnosis, analyze
from .scaling import Scaling, scaling
from .series import series

__all__ = ["Comparison", "compare", "Diagnosis", "analyze", "Scaling", "scaling", "series"]
