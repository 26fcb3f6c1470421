"""The speculative decoding engine: pure Python and numpy, no llama.cpp, no printing."""
