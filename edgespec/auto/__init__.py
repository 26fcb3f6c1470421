"""`auto`: speculation controlled per round. Its drafters `offer` proposals, its policy chooses
one and learns from the round; `start.py` starts a generation with what earlier ones learned."""
