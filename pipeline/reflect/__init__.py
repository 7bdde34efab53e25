"""The reflect wing: the pool, the Reflector, the Dropper, generations, the reflect job and their prompts."""
