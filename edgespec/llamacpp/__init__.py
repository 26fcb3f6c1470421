"""The adapter over llama.cpp: the model, and the target on llama.cpp's RPC servers."""
