"""The parts `edgespec.api.Speculator` builds a generation from: its prompt's tokens, its
drafter and draft-length policy, and what `auto` carries from one generation to the next."""
