"""Bad input across every entry point: each case must end in one clear line, fast, with nothing changed.

``harness`` runs a :class:`~tests.badinputs.harness.Case` and judges its outcome; the other modules hold
the cases, one module per kind of entry point. ``hack/bad-inputs.py`` runs them all and prints a table;
``tests/unit/test_bad_inputs.py`` runs each as a test in ``make test``.
"""
