"""tiers: measure, trace, place and program the layers of parallel machines."""

__version__ = "0.1.0"
