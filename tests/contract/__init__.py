"""Contract tier: one set of behavioural checks run against every GPU backend (see ``checks``)."""
