"""Graph samplers whose bounds the privacy analysis rests on (tested, not assumed)."""
