"""HTTP routes, one module per area. Each defines ``router``; ``create_app`` includes it under ``/v1``."""
