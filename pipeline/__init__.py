"""Pipeline: events -> Observer -> Reflector -> Dropper -> generations; the LLM client; the projection."""
