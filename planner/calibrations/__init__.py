"""Calibration profiles shipped with the package (data only): see planner/calibration/public_profiles.py."""
