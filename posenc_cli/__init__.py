"""posenc: measure how positional encodings extrapolate, on a laptop."""

__version__ = "0.1.0"
