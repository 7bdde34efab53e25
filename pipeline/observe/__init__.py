"""The observe wing: input hygiene, the packer, the Observer, coverage and the Observer's prompts."""
