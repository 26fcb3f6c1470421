"""`edgespec bench`: interleaved A/B runs of drafter configurations, with a losslessness check."""
