"""Schema migrations, one module each, in order. Never edit one that has shipped: add a new one."""
