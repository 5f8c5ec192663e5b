"""dtune: self-tuning parallel HTTP transfer of large scientific datasets."""

__version__ = "0.1.0"
