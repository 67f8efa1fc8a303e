"""The ``gpu-operator`` command line: one entry point, one module per subcommand group."""
