"""The adapter over llama.cpp: its library, the model and its vocabulary, the RPC servers."""
