"""Text in and out of the models: chat templates and conversations, infill prompts, grammars,
input read under a cap, and a project's memory of past generations."""
