"""Calibration: fitting the cost model's coefficients to measured times, and the profiles that hold them."""
