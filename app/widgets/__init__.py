"""The playground's Qt widgets."""
